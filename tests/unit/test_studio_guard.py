"""Issue 41 item 5, "no one else in": every refusal of the studio's Guard, the files it never
serves, and hostile note or case text rendered as text (the page's CSP forbids inline script).

Through Starlette's TestClient (the app in this process, no socket), addressed as the
studio is: http://127.0.0.1:PORT.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from evalkit.studio.app import create_app
from evalkit.studio.guard import CSP, csrf_value
from evalkit.studio.project import StudioProject
from tests.studio_project import IMG, SCRIPT, write_project

PORT = 8765
TOKEN = "t0ken-for-tests"
BASE = f"http://127.0.0.1:{PORT}"


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("studio")
    p = write_project(root)
    secret = root / "secret.md"
    secret.write_text("# Secret\n\nthe neighbour's diary\n", encoding="utf-8")
    os.symlink(secret, p["vault"] / "Link out.md")  # a note that leads out of the vault
    return {**p, "secret": secret}


@pytest.fixture(scope="module")
def app(paths: dict[str, Path]) -> Any:
    project = StudioProject([paths["eval_set"]], paths["vault"], paths["results"], root=paths["root"])
    return create_app(project, token=TOKEN, port=PORT)


def _client(app: Any, **kw: Any) -> TestClient:
    return TestClient(app, base_url=BASE, follow_redirects=False, **kw)


@pytest.fixture
def signed_in(app: Any) -> TestClient:
    client = _client(app)
    first = client.get(f"/?token={TOKEN}")
    assert first.status_code == 303 and first.headers["location"] == "/"
    assert "HttpOnly" in first.headers["set-cookie"] and "SameSite=Strict" in first.headers["set-cookie"]
    return client


def _edit(client: TestClient, body: Any = None, **headers: str) -> Any:
    body = body if body is not None else {"set": "eval_set.jsonl", "id": "g-1", "version": "0", "op": "group", "args": {}}
    sent = {"origin": BASE, "x-studio-csrf": csrf_value(TOKEN), "content-type": "application/json", **headers}
    return client.post("/api/edit", json=body, headers={k: v for k, v in sent.items() if v})


# ---------------------------------------------------------------- the token


def test_a_request_without_the_token_is_refused(app: Any) -> None:
    for path in ("/", "/queue?set=eval_set.jsonl", "/static/studio.js", "/case?set=eval_set.jsonl&id=g-1"):
        got = _client(app).get(path)
        assert got.status_code == 403, path
        assert "no token" in got.text


def test_a_wrong_token_is_refused_in_the_url_and_in_the_cookie(app: Any) -> None:
    assert _client(app).get("/?token=guess").status_code == 403
    client = _client(app, cookies={f"evalkit_studio_{PORT}": "guess"})
    assert client.get("/").status_code == 403


def test_the_token_becomes_a_cookie_and_leaves_the_address(signed_in: TestClient) -> None:
    got = signed_in.get("/queue?set=eval_set.jsonl&token=" + TOKEN)
    assert got.status_code == 303 and got.headers["location"] == "/queue?set=eval_set.jsonl"
    assert signed_in.get("/").status_code == 200


def test_another_studios_cookie_is_not_ours(app: Any) -> None:
    # one cookie per port: the token of a studio on another port opens nothing here
    client = _client(app, cookies={"evalkit_studio_9999": TOKEN})
    assert client.get("/").status_code == 403


# ---------------------------------------------------------------- host and origin


def test_another_host_header_is_refused_even_with_the_token(signed_in: TestClient) -> None:
    # DNS rebinding: a page of evil.example resolved to 127.0.0.1 sends Host: evil.example
    for host in ("evil.example", f"evil.example:{PORT}", "127.0.0.1:1", "0.0.0.0:8765"):
        got = signed_in.get("/", headers={"host": host})
        assert got.status_code == 403, host
    assert signed_in.get("/", headers={"host": f"localhost:{PORT}"}).status_code == 200


def test_a_cross_origin_request_is_refused(signed_in: TestClient) -> None:
    assert signed_in.get("/", headers={"origin": "http://evil.example"}).status_code == 403
    assert signed_in.get("/", headers={"origin": "null"}).status_code == 403
    assert signed_in.get("/", headers={"sec-fetch-site": "cross-site"}).status_code == 403
    assert signed_in.get("/", headers={"sec-fetch-site": "same-site"}).status_code == 403
    assert signed_in.get("/", headers={"sec-fetch-site": "same-origin"}).status_code == 200


# ---------------------------------------------------------------- writes (CSRF)


def test_a_write_from_another_origin_or_without_the_pages_value_is_refused(signed_in: TestClient, paths: dict[str, Path]) -> None:
    before = paths["eval_set"].read_bytes()
    assert _edit(signed_in, origin="http://evil.example").status_code == 403
    assert _edit(signed_in, origin="").status_code == 403  # no Origin at all
    assert _edit(signed_in, **{"x-studio-csrf": ""}).status_code == 403
    assert _edit(signed_in, **{"x-studio-csrf": TOKEN}).status_code == 403  # the token is not the CSRF value
    got = signed_in.post("/api/edit", content=b"set=eval_set.jsonl", headers={
        "origin": BASE, "x-studio-csrf": csrf_value(TOKEN), "content-type": "application/x-www-form-urlencoded"})
    assert got.status_code == 415
    assert signed_in.put("/api/edit", headers={"origin": BASE}).status_code == 405
    assert paths["eval_set"].read_bytes() == before


def test_a_write_with_the_token_in_the_url_but_no_cookie_is_refused(app: Any) -> None:
    client = _client(app)
    got = client.post(f"/api/edit?token={TOKEN}", json={}, headers={"origin": BASE, "x-studio-csrf": csrf_value(TOKEN)})
    assert got.status_code == 403


def test_a_well_formed_write_reaches_the_edit(signed_in: TestClient) -> None:
    # the guard lets it through; the stale version is the edit's own refusal (a conflict)
    got = _edit(signed_in)
    assert got.status_code == 409 and got.json()["conflict"] is True


def test_a_bad_edit_body_is_refused(signed_in: TestClient) -> None:
    assert _edit(signed_in, body=[1, 2]).status_code == 400
    assert _edit(signed_in, body={"set": "/etc/passwd", "id": "g-1", "version": "0", "op": "group"}).status_code == 404
    got = signed_in.post("/api/edit", content=b"{not json", headers={
        "origin": BASE, "x-studio-csrf": csrf_value(TOKEN), "content-type": "application/json"})
    assert got.status_code == 400


# ---------------------------------------------------------------- files it never serves


@pytest.mark.parametrize("path", [
    "/static/../../../etc/passwd", "/static/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/static/report.js", "/static/",
    "/eval_set.jsonl", "/notes/car/Car.md", "/results/r1/results.jsonl", "/etc/passwd",
])
def test_no_route_serves_a_file_by_path(signed_in: TestClient, path: str) -> None:
    assert signed_in.get(path).status_code == 404


@pytest.mark.parametrize("name", ["/etc/passwd", "../eval_set.jsonl", "results/r1/results.jsonl", "notes/car/Car.md", ""])
def test_an_eval_set_that_is_not_one_of_ours_is_not_found(signed_in: TestClient, name: str) -> None:
    assert signed_in.get("/queue", params={"set": name}).status_code == 404
    assert signed_in.get("/case", params={"set": name, "id": "g-1"}).status_code == 404


@pytest.mark.parametrize("note", ["../secret.md", "/etc/passwd", "Link out.md", "car/../../secret.md", "%2e%2e/secret.md"])
def test_a_note_outside_the_vault_is_never_shown(signed_in: TestClient, paths: dict[str, Path], note: str) -> None:
    got = signed_in.get("/case", params={"set": "eval_set.jsonl", "id": "g-1", "note": note})
    assert got.status_code == 200
    assert "diary" not in got.text and "root:" not in got.text
    assert "Link out.md" not in got.text  # a link out of the vault is not even listed


def test_a_search_never_reaches_outside_the_vault(signed_in: TestClient) -> None:
    got = signed_in.get("/case", params={"set": "eval_set.jsonl", "id": "g-1", "q": "diary"})
    assert "diary</span>" not in got.text and "0 hits" in got.text


def test_a_run_id_that_is_not_a_run_shows_no_run(signed_in: TestClient) -> None:
    got = signed_in.get("/case", params={"set": "eval_set.jsonl", "id": "g-1", "run": "../r1"})
    assert got.status_code == 200 and "Choose a run" in got.text


# ---------------------------------------------------------------- headers and hostile text


def test_every_response_has_the_csp_and_the_security_headers(app: Any, signed_in: TestClient) -> None:
    for got in (_client(app).get("/"), signed_in.get("/"), signed_in.get("/static/studio.js"), signed_in.get("/nope"),
                _edit(signed_in, origin="http://evil.example")):
        assert got.headers["content-security-policy"] == CSP
        assert got.headers["x-content-type-options"] == "nosniff"
        assert got.headers["x-frame-options"] == "DENY"
        assert got.headers["referrer-policy"] == "no-referrer"
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP.split("script-src")[1].split(";")[0]


def test_hostile_case_note_and_chunk_text_is_escaped(signed_in: TestClient) -> None:
    got = signed_in.get("/case", params={"set": "eval_set.jsonl", "id": "g-4", "run": "r1", "note": "Hostile.md", "q": "inside"})
    assert got.status_code == 200
    page = got.text
    # the question, key facts, the run's chunks, the note's outline and text, a search hit: all as text
    assert SCRIPT not in page and IMG not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x onerror=alert(2)&gt;" in page
    assert page.count("<script") == 1  # ours: <script src="/static/studio.js">
    queue = signed_in.get("/queue", params={"set": "eval_set.jsonl"}).text
    assert SCRIPT not in queue and "&lt;script&gt;" in queue


def test_a_token_or_csrf_value_that_is_not_ascii_is_refused_not_a_crash(app: Any, signed_in: TestClient) -> None:
    # regression: hmac.compare_digest raises TypeError on non-ASCII str (a 500, not a refusal)
    assert _client(app).get("/", params={"token": "tökén"}).status_code == 403
    assert _client(app).get("/", headers={"cookie": f"evalkit_studio_{PORT}=tökén".encode("latin-1")}).status_code == 403
    got = signed_in.post("/api/edit", json={}, headers={"origin": BASE, "x-studio-csrf": "é".encode("latin-1")})
    assert got.status_code == 403

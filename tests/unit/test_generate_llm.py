"""LLM candidate generation (`evalkit generate --model ...`): sections, samples, wikilinks,
prompts, anchors by id, drops and their reasons, cache, report and config, CLI.

Every LLM reply comes from respx (OpenAI, Anthropic) or from a loopback server: no network,
no real key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
import tenacity
from typer.testing import CliRunner

from evalkit.authoring.generate_llm import (
    GEN_PROMPT_VERSION,
    answer_in_vault,
    generate_with_llm,
)
from evalkit.authoring.sections import (
    Section,
    parse_wikilinks,
    resolve_wikilink,
    sample_sections,
    vault_sections,
    wikilink_pairs,
)
from evalkit.cli.main import app
from evalkit.errors import BadConfig, JudgeConfigError
from evalkit.evalset.anchorcheck import check_anchors, corpus_from_vault
from evalkit.evalset.load import load_eval_set
from evalkit.judges.settings import JudgeSettings
from evalkit.net.retry import RetryPolicy
from evalkit.reference.tokens import terms
from tests.support import loopback_server
from tests.unit.judges.judge_helpers import (
    ANTHROPIC_MODEL,
    ANTHROPIC_URL,
    OPENAI_MODEL,
    OPENAI_URL,
    anthropic_tool_reply,
    openai_reply,
)

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT.parent / "shared" / "corpora" / "obsidian-tasks" / "vault"
FAKE_KEY = "sk-test-abc123def456ghi789jkl"

ESPRESSO = """\
# Espresso machine

## Descaling

Run citric acid through the group head every two months, then flush the boiler twice with clean
water before pulling the next shot. Use the small blue scoop that lives in the drawer under the
sink. Wear gloves because the solution stings.

## Beans

We buy beans from the roaster on Market Street. The house blend is a medium roast; see
[[Grinder#Burr settings|the grinder notes]] for the right setting. A one kilo bag lasts about
three weeks in this household of two people.
"""

GRINDER = """\
# Grinder

## Burr settings

Setting 12 on the burr dial suits the medium house blend. Go finer, towards 9, when shots run
faster than twenty five seconds, and coarser when they choke the machine completely. Clean the
burrs every month.

## Repairs

Bellini in the old town repairs the motor. The last repair in March cost eighty euros and took a
full week, so keep the old hand grinder in the cupboard for emergencies at home.
"""

TOMATOES = """\
# Tomatoes

## Sowing

Sow tomato seeds indoors in early March on the warm windowsill of the spare room. Transplant the
seedlings into bigger pots once they have two true leaves, and move them outdoors after the last
frost in May.

## Feeding

Feed the plants with diluted comfrey tea every ten days from the first flowers onwards. Stop
feeding in late September when the nights turn cold and the fruit will not ripen any more.

## FAQ

Q: Which variety grows best?
A: Sungold cherry tomatoes.
"""

# One question per sampled section, by S1's heading (each passes the overlap filter).
QUESTIONS = {
    "## Descaling": "How often should the espresso machine get its acid cleaning?",
    "## Beans": "Where do we get our coffee from?",
    "## Burr settings": "What number should the grinder be on for the house coffee?",
    "## Repairs": "Who fixes the motor if it breaks?",
    "## Sowing": "When do the young tomato plants go outside?",
    "## Feeding": "What do I give the plants as fertiliser?",
}
MULTI_Q = "Which dial number matches the beans we buy?"
NOT_IN_VAULT = {"question": "Which vet looks after our cat?", "key_terms": ["vet", "cat"]}
IN_VAULT = {"question": "What did the last grinder fix set us back?", "key_terms": ["repair", "eighty euros"]}


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    (root / "kitchen").mkdir(parents=True)
    (root / "garden").mkdir()
    (root / "kitchen" / "Espresso.md").write_text(ESPRESSO, encoding="utf-8")
    (root / "kitchen" / "Grinder.md").write_text(GRINDER, encoding="utf-8")
    (root / "garden" / "Tomatoes.md").write_text(TOMATOES, encoding="utf-8")
    return root


@pytest.fixture
def openai_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    for var in ("EVALKIT_JUDGE_PROVIDER", "EVALKIT_JUDGE_MODEL", "EVALKIT_JUDGE_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    return FAKE_KEY


@pytest.fixture
def router() -> Iterator[respx.Router]:
    with respx.mock(assert_all_called=False, assert_all_mocked=True) as r:
        r.post(OPENAI_URL, name="openai")
        r.post(ANTHROPIC_URL, name="anthropic")
        yield r


def _settings(tmp_path: Path, **kw: Any) -> JudgeSettings:
    kw.setdefault("provider", "openai")
    kw.setdefault("model", OPENAI_MODEL)
    kw.setdefault("cache_path", tmp_path / "cache" / "gen.sqlite")
    kw.setdefault("retry_policy", RetryPolicy(attempts=2, wait=tenacity.wait_none()))
    return JudgeSettings(**kw)


def _s1_heading(prompt: str) -> str:
    return re.search(r"\[S1\] file: .*\nheading path: (.*)\n", prompt).group(1).split(" > ")[-1]


def _first_b_id(prompt: str) -> str:
    return re.search(r"\[(S\d+)\]", prompt[prompt.index("Note B:"):]).group(1)


def _reply_for(kind: str, prompt: str, unanswerable: list[dict] | None = None) -> dict[str, Any]:
    if kind == "generated_question":
        return {"question": QUESTIONS[_s1_heading(prompt)], "expected_key_facts": ["a fact from the section"],
                "difficulty": "easy", "category": "factual", "support_section_ids": ["S1"]}
    if kind == "generated_multi_hop":
        return {"question": MULTI_Q, "expected_key_facts": ["medium roast", "setting 12"], "difficulty": "medium",
                "support_section_ids": ["S1", _first_b_id(prompt), "S2"]}
    return {"questions": unanswerable if unanswerable is not None else [IN_VAULT, NOT_IN_VAULT]}


def _kind_of(prompt: str) -> str:
    if "Note B:" in prompt:
        return "generated_multi_hop"
    if "do NOT contain" in prompt:
        return "generated_unanswerable"
    return "generated_question"


class OpenAIHandler:
    """respx side effect: a reply by the schema name in response_format; overrides by kind."""

    def __init__(self, overrides: dict[str, list[Any]] | None = None, unanswerable: list[dict] | None = None):
        self.bodies: list[dict[str, Any]] = []
        self.overrides = overrides or {}
        self.unanswerable = unanswerable

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        kind = body["response_format"]["json_schema"]["name"]
        queue = self.overrides.get(kind)
        if queue:
            content = queue.pop(0)
            return httpx.Response(200, json=openai_reply(content if isinstance(content, str) else json.dumps(content)))
        prompt = body["messages"][1]["content"]
        return httpx.Response(200, json=openai_reply(json.dumps(_reply_for(kind, prompt, self.unanswerable))))


# --------------------------------------------------------------------------- end to end, OpenAI


def test_openai_single_multi_hop_and_unanswerable(vault: Path, tmp_path: Path, router: respx.Router, openai_key: str) -> None:
    handler = OpenAIHandler()
    router["openai"].side_effect = handler

    r = generate_with_llm(vault, settings=_settings(tmp_path), n=20, multi_hop=1, unanswerable=1, seed=0)

    by_pattern = {p: [c.case for c in r.candidates if c.pattern == p] for p in ("llm_question", "llm_multi_hop", "llm_unanswerable")}
    assert sorted(c["question"] for c in by_pattern["llm_question"]) == sorted(QUESTIONS.values())
    [mh] = by_pattern["llm_multi_hop"]
    # S1 = Beans (holds the link), S2 = Descaling (A); S3 = Burr settings (the linked #heading, B)
    assert mh["gold_supports"] == [
        {"rel_path": "kitchen/Espresso.md", "heading_path": "# Espresso machine > ## Beans"},
        {"rel_path": "kitchen/Espresso.md", "heading_path": "# Espresso machine > ## Descaling"},
        {"rel_path": "kitchen/Grinder.md", "heading_path": "# Grinder > ## Burr settings"},
    ]
    assert mh["required_support_groups"] == [[0, 2], [1, 2]]
    assert mh["category"] == "multi_hop" and mh["difficulty"] == "medium"
    [un] = by_pattern["llm_unanswerable"]
    assert un["question"] == NOT_IN_VAULT["question"] and un["answerable"] is False and un["gold_supports"] == []
    assert "vet; cat" in un["notes"]
    # answerable anchors are real sections of the vault
    assert check_anchors(r.cases, corpus_from_vault(vault)) == []
    q = next(c for c in by_pattern["llm_question"] if c["question"] == QUESTIONS["## Repairs"])
    assert q["gold_supports"] == [{"rel_path": "kitchen/Grinder.md", "heading_path": "# Grinder > ## Repairs"}]
    assert q["tags"][:2] == ["generated", "llm"] and q["label_source"] == "generated"
    assert q["expected_key_facts"] == ["a fact from the section"] and q["difficulty"] == "easy"
    assert q["notes"] == f"generated by openai:{OPENAI_MODEL} (prompt gen-v1) from kitchen/Grinder.md > # Grinder > ## Repairs"

    # the prompts list sections by id and ask for ids, not paths
    single = next(b for b in handler.bodies if b["response_format"]["json_schema"]["name"] == "generated_question")
    prompt = single["messages"][1]["content"]
    assert "[S1] file: " in prompt and "support_section_ids" in prompt
    schema = single["response_format"]["json_schema"]["schema"]
    assert set(schema["required"]) == {"question", "expected_key_facts", "difficulty", "category", "support_section_ids"}
    assert "rel_path" not in json.dumps(schema) and "heading_path" not in json.dumps(schema)
    assert "only ids from the list" in schema["properties"]["support_section_ids"]["description"]

    rep = r.report
    assert rep["generated_by_pattern"] == {"llm_question": 6, "llm_multi_hop": 1, "llm_unanswerable": 2}
    assert rep["filtered"] == {"answer_in_vault": 1}
    assert rep["written"] == 8 and rep["difficulties"] == {"easy": 6, "medium": 1}
    llm = rep["llm"]
    assert llm["calls"] == 8 and llm["cache_hits"] == 0 and llm["prompt_tokens"] == 800 and llm["price_known"] is True
    assert llm["cost_usd"] > 0 and llm["prompt_version"] == GEN_PROMPT_VERSION
    assert r.config["sample"] and r.config["pairs"][0]["a"] == "kitchen/Espresso.md"


def test_written_cases_load_and_retrieval_flags_run(vault: Path, tmp_path: Path, router: respx.Router, openai_key: str) -> None:
    from evalkit.interop.importers.base import ImportedCase
    from evalkit.interop.importers.output import write_eval_set

    router["openai"].side_effect = OpenAIHandler()
    r = generate_with_llm(vault, settings=_settings(tmp_path), n=3, multi_hop=1, unanswerable=1, check_retrieval=True)
    out = tmp_path / "cand.jsonl"
    write_eval_set([ImportedCase(c.case, c.rel_path or "v", i) for i, c in enumerate(r.candidates)], out)
    cases = load_eval_set([out]).cases
    assert len(cases) == len(r.candidates) == 5
    assert "unretrievable" in r.report["flagged"]


def test_invented_anchor_is_rejected(vault: Path, tmp_path: Path, router: respx.Router, openai_key: str) -> None:
    bad = {"question": "Who fixes the motor if it breaks?", "expected_key_facts": ["Bellini"], "difficulty": "easy",
           "category": "factual", "support_section_ids": ["S1", "S99"]}
    router["openai"].side_effect = OpenAIHandler({"generated_question": [bad]})
    r = generate_with_llm(vault, settings=_settings(tmp_path), n=1, multi_hop=0, unanswerable=0, check_retrieval=False)
    assert r.candidates == []
    [item] = r.report["filtered_items"]
    assert item["reason"] == "invented_anchor" and "'S99'" in item["detail"]


def test_multi_hop_in_one_note_is_rejected(vault: Path, tmp_path: Path, router: respx.Router, openai_key: str) -> None:
    one = {"question": MULTI_Q, "expected_key_facts": ["x"], "difficulty": "hard", "support_section_ids": ["S1", "S2"]}
    router["openai"].side_effect = OpenAIHandler({"generated_multi_hop": [one]})
    r = generate_with_llm(vault, settings=_settings(tmp_path), n=0, multi_hop=1, unanswerable=0, check_retrieval=False)
    assert r.candidates == [] and r.report["filtered"] == {"single_note": 1}


def test_junk_once_is_repaired(vault: Path, tmp_path: Path, router: respx.Router, openai_key: str) -> None:
    handler = OpenAIHandler({"generated_question": ["sure! here is a question about descaling"]})
    router["openai"].side_effect = handler
    r = generate_with_llm(vault, settings=_settings(tmp_path), n=1, multi_hop=0, unanswerable=0, check_retrieval=False)
    assert len(r.candidates) == 1 and router["openai"].call_count == 2
    assert "did not match the required JSON schema" in handler.bodies[1]["messages"][-1]["content"]
    assert r.report["llm"]["repairs"] == 1 and r.report["filtered"] == {}


def test_junk_twice_is_dropped_as_llm_error(vault: Path, tmp_path: Path, router: respx.Router, openai_key: str) -> None:
    router["openai"].side_effect = OpenAIHandler({"generated_question": ["not json", '{"question": ""}']})
    r = generate_with_llm(vault, settings=_settings(tmp_path), n=1, multi_hop=0, unanswerable=0, check_retrieval=False)
    assert r.candidates == []
    assert r.report["filtered"] == {"llm_error": 1}
    assert r.report["filtered_items"][0]["detail"].startswith("parse_failure: ")
    assert r.report["llm"]["failures"] == {"parse_failure": 1}


def test_too_many_key_facts_is_repaired_by_the_schema(vault: Path, tmp_path: Path, router: respx.Router, openai_key: str) -> None:
    seven = {"question": "Who fixes the motor?", "expected_key_facts": [f"fact {i}" for i in range(7)], "difficulty": "easy",
             "category": "factual", "support_section_ids": ["S1"]}
    router["openai"].side_effect = OpenAIHandler({"generated_question": [seven, seven]})
    r = generate_with_llm(vault, settings=_settings(tmp_path), n=1, multi_hop=0, unanswerable=0, check_retrieval=False)
    assert r.candidates == [] and r.report["filtered"] == {"llm_error": 1}


def test_unanswerable_kept_or_dropped_by_the_vault(vault: Path, tmp_path: Path, router: respx.Router, openai_key: str) -> None:
    router["openai"].side_effect = OpenAIHandler(unanswerable=[IN_VAULT, NOT_IN_VAULT])
    r = generate_with_llm(vault, settings=_settings(tmp_path), n=0, multi_hop=0, unanswerable=1, check_retrieval=False)
    assert [c.case["question"] for c in r.candidates] == [NOT_IN_VAULT["question"]]
    assert r.candidates[0].case["answerable"] is False
    assert [(d["question"], d["reason"]) for d in r.report["filtered_items"]] == [(IN_VAULT["question"], "answer_in_vault")]
    assert router["openai"].call_count == 1  # the one reply held a keeper


def test_unanswerable_calls_are_bounded(vault: Path, tmp_path: Path, router: respx.Router, openai_key: str) -> None:
    router["openai"].side_effect = OpenAIHandler(unanswerable=[IN_VAULT])
    r = generate_with_llm(vault, settings=_settings(tmp_path), n=0, multi_hop=0, unanswerable=3, check_retrieval=False)
    assert r.candidates == [] and router["openai"].call_count == 2  # ceil(3/5) + 1
    # the second call is told what was asked already (and is not a cache hit of the first)
    second = json.loads(router["openai"].calls[1].request.content)["messages"][1]["content"]
    assert IN_VAULT["question"] in second


def test_answer_in_vault() -> None:
    sections = [set(terms("Bellini repairs the motor for eighty euros."))]
    assert answer_in_vault(["repair", "eighty euros"], sections) is True
    assert answer_in_vault(["repair", "ninety euros"], sections) is False
    assert answer_in_vault(["the", "of"], sections) is None


def test_second_run_is_served_from_the_cache(vault: Path, tmp_path: Path, router: respx.Router, openai_key: str) -> None:
    router["openai"].side_effect = OpenAIHandler()
    kw = dict(n=4, multi_hop=1, unanswerable=1, check_retrieval=False, seed=3)
    first = generate_with_llm(vault, settings=_settings(tmp_path), **kw)
    calls = router["openai"].call_count
    assert calls == 6
    second = generate_with_llm(vault, settings=_settings(tmp_path), **kw)
    assert router["openai"].call_count == calls
    assert second.cases == first.cases
    assert second.report["llm"]["calls"] == 0 and second.report["llm"]["cache_hits"] == 6


def test_bad_key_stops_generation(vault: Path, tmp_path: Path, router: respx.Router, openai_key: str) -> None:
    router["openai"].return_value = httpx.Response(401, json={"error": {"message": "Incorrect API key", "type": "invalid_request_error"}})
    with pytest.raises(JudgeConfigError):
        generate_with_llm(vault, settings=_settings(tmp_path), n=2, multi_hop=0, unanswerable=0, check_retrieval=False)


def test_no_llm_named_is_refused(vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("EVALKIT_JUDGE_PROVIDER", "EVALKIT_JUDGE_MODEL", "EVALKIT_JUDGE_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(BadConfig, match="needs --model"):
        generate_with_llm(vault, settings=JudgeSettings(cache_path=tmp_path / "c.sqlite"), n=1)


# --------------------------------------------------------------------------- Anthropic


def test_anthropic_tool_use(vault: Path, tmp_path: Path, router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-real")
    bodies = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        name = body["tool_choice"]["name"]
        return httpx.Response(200, json=anthropic_tool_reply(_reply_for(name, body["messages"][0]["content"]), name=name))

    router["anthropic"].side_effect = handler
    r = generate_with_llm(vault, settings=_settings(tmp_path, provider="anthropic", model=ANTHROPIC_MODEL),
                          n=1, multi_hop=1, unanswerable=0, check_retrieval=False)
    assert {c.pattern for c in r.candidates} == {"llm_question", "llm_multi_hop"}
    assert check_anchors(r.cases, corpus_from_vault(vault)) == []
    tool = next(b for b in bodies if b["tool_choice"]["name"] == "generated_question")["tools"][0]
    assert "support_section_ids" in tool["input_schema"]["properties"]
    assert r.report["llm"]["provider"] == "anthropic"


# --------------------------------------------------------------------------- loopback server via the CLI


class _Compat(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    auth: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        type(self).auth.append(self.headers.get("Authorization", ""))
        assert body["response_format"] == {"type": "json_object"}
        prompt = body["messages"][-1]["content"]
        reply = json.dumps(openai_reply(json.dumps(_reply_for(_kind_of(prompt), prompt)), model=body["model"])).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


@pytest.fixture
def compat_server() -> Iterator[str]:
    _Compat.auth = []
    with loopback_server(_Compat) as srv:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"


def test_cli_against_a_loopback_server(vault: Path, tmp_path: Path, compat_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-loopback-secret-0123456789abcdef"
    monkeypatch.setenv("OPENAI_COMPAT_API_KEY", secret)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out" / "cand.jsonl"
    args = ["generate", "--vault", str(vault), "--output", str(out), "--provider", "openai-compatible",
            "--base-url", compat_server, "--model", "some-model@sha256:0123456789ab", "--multi-hop", "1",
            "--unanswerable", "1", "--cache", str(tmp_path / "cache.sqlite")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "8 calls, 0 cache hits" in res.stdout and "cand.config.json" in res.stdout
    assert _Compat.auth and all(a == f"Bearer {secret}" for a in _Compat.auth)

    cases = load_eval_set([out]).cases
    assert len(cases) == 8
    report = json.loads((out.parent / "cand.report.json").read_text())
    config = json.loads((out.parent / "cand.config.json").read_text())
    assert report["written"] == 8 and report["llm"]["provider"] == "openai-compatible"
    assert config["base_url"] == compat_server and config["model"] == "some-model@sha256:0123456789ab"
    assert config["prompt_version"] == "gen-v1" and config["n"] == 20 and len(config["sample"]) == 6
    for f in (out, out.parent / "cand.report.json", out.parent / "cand.config.json"):
        assert secret not in f.read_text()

    again = CliRunner().invoke(app, [*args, "--force", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["llm"]["cache_hits"] == 8


def test_cli_unpinned_local_model_exits_2(vault: Path, tmp_path: Path, compat_server: str) -> None:
    res = CliRunner().invoke(app, ["generate", "--vault", str(vault), "--output", str(tmp_path / "c.jsonl"),
                                   "--base-url", compat_server, "--model", "some-model"])
    assert res.exit_code == 2 and "not pinned" in res.output
    assert "--model 'some-model@sha256:" in res.output and "--judge-model" not in res.output


def test_cli_env_alone_stays_offline(vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_JUDGE_MODEL", OPENAI_MODEL)
    monkeypatch.setenv("EVALKIT_JUDGE_PROVIDER", "openai")
    out = tmp_path / "c.jsonl"
    with respx.mock(assert_all_mocked=True):  # any HTTP call would fail
        res = CliRunner().invoke(app, ["generate", "--vault", str(vault), "--output", str(out), "--no-retrieval", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert "llm" not in report and report["written_by_pattern"]["qa_pair"] == 1
    assert not (tmp_path / "c.config.json").exists()


# --------------------------------------------------------------------------- sections and samples


def test_sections_skip_short_bodies(vault: Path) -> None:
    secs = vault_sections(vault)
    assert [s.heading_path for s in secs["kitchen/Grinder.md"]] == ["# Grinder > ## Burr settings", "# Grinder > ## Repairs"]
    faq = [s for s in secs["garden/Tomatoes.md"] if s.chain[-1] == "## FAQ"]
    assert faq and faq[0].body_words < 25  # listed as context, never sampled
    eligible = [s for n in secs.values() for s in n if s.body_words >= 25]
    assert len(eligible) == 6


def _fake_sections() -> list[Section]:
    return [Section(f"{folder}{i}.md" if not folder else f"{folder}/n{i}.md", (f"# H{i}",), "text", 30, 1)
            for folder in ("", "alpha", "beta") for i in range(8)]


def test_sample_spreads_over_folders_and_is_seeded() -> None:
    secs = _fake_sections()
    a = sample_sections(secs, 6, seed=1)
    assert a == sample_sections(secs, 6, seed=1)
    assert {s.folder for s in a[:3]} == {"", "alpha", "beta"}  # round-robin
    assert [s.folder for s in a] == [s.folder for s in a[:3]] * 2
    assert a != sample_sections(secs, 6, seed=2)
    assert len(sample_sections(secs, 100, seed=1)) == len(secs)
    # the exact order for seed 1 (random.Random(1): each folder shuffled, then the folder order)
    assert [s.rel_path for s in a] == ["alpha/n2.md", "3.md", "beta/n2.md", "alpha/n6.md", "6.md", "beta/n5.md"]
    # the folder order is shuffled too: not always the sorted order
    assert {sample_sections(secs, 3, seed=s)[0].folder for s in range(10)} == {"", "alpha", "beta"}


def test_sample_of_the_test_vault_covers_both_folders(vault: Path) -> None:
    eligible = [s for n in vault_sections(vault).values() for s in n if s.body_words >= 25]
    got = sample_sections(eligible, 2, seed=0)
    assert {s.folder for s in got} == {"kitchen", "garden"}


# --------------------------------------------------------------------------- wikilinks


def test_parse_wikilinks() -> None:
    text = (
        "See [[Grinder]] and [[Grinder#Burr settings|the burrs]], not ![[diagram.png]] or ![[Embedded note]].\n"
        "Inline `[[Not a link]]` code.\n"
        "```\n[[In a fence]]\n```\n"
        "| [[Table target\\|alias]] |\n"
        "Same note: [[#Heading]]; alias only: [[Tomatoes|toms]]"
    )
    got = [(l.target, l.heading, l.alias) for l in parse_wikilinks(text)]
    assert got == [
        ("Grinder", None, None),
        ("Grinder", "Burr settings", "the burrs"),
        ("Table target", None, "alias"),
        ("Tomatoes", None, "toms"),
    ]


def test_resolve_wikilink() -> None:
    notes = ["a/Grinder.md", "b/deep/grinder.md", "Grinder Notes.md", "c/Tomatoes.md", "x/Tomatoes.md"]
    assert resolve_wikilink("b/deep/grinder", notes) == "b/deep/grinder.md"  # exact path
    assert resolve_wikilink("b/deep/grinder.md", notes) == "b/deep/grinder.md"
    assert resolve_wikilink("GRINDER", notes) == "a/Grinder.md"  # stem, case-insensitive, shortest path
    assert resolve_wikilink("tomatoes", notes) == "c/Tomatoes.md"  # same length: first in order
    assert resolve_wikilink("Grinder Notes", notes) == "Grinder Notes.md"
    assert resolve_wikilink("Nothing", notes) is None


def test_pairs_are_unordered_and_once(tmp_path: Path) -> None:
    root = tmp_path / "v"
    root.mkdir()
    (root / "A.md").write_text("# A\n\nLinks to [[B]] and again [[b#Two]] and itself [[A]].\n", encoding="utf-8")
    (root / "B.md").write_text("# B\n\nBack to [[A]].\n\n## Two\n\nMore [[C]] text.\n```\n[[D]]\n```\n", encoding="utf-8")
    (root / "C.md").write_text("# C\n\nNo links, ![[B]] is an embed.\n", encoding="utf-8")
    (root / "D.md").write_text("# D\n\nLinked only from a fence.\n", encoding="utf-8")
    pairs = wikilink_pairs(vault_sections(root))
    assert [(p.a, p.b, p.b_heading) for p in pairs] == [("A.md", "B.md", None), ("B.md", "C.md", None)]
    assert pairs[1].a_chain == ("# B", "## Two")


# --------------------------------------------------------------------------- Obsidian Tasks docs


@pytest.mark.skipif(not TASKS.is_dir(), reason="../shared/corpora/obsidian-tasks is not here")
def test_obsidian_tasks_pairs_and_anchors(tmp_path: Path, router: respx.Router, openai_key: str) -> None:
    secs = vault_sections(TASKS)
    pairs = wikilink_pairs(secs)
    assert len(pairs) > 20
    questions = iter([
        "Where do I change which statuses count as done?", "Can recurring items skip weekends?",
        "What breaks when a file has invalid dates?", "How would I show only overdue work from my projects?",
        "Why would a query ignore my nested lists?", "Is there a way to group results by folder?",
    ])

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        kind = body["response_format"]["json_schema"]["name"]
        prompt = body["messages"][1]["content"]
        reply = _reply_for(kind, prompt)
        if kind == "generated_question":
            reply["question"] = next(questions)
        elif kind == "generated_multi_hop":
            reply["support_section_ids"] = ["S1", _first_b_id(prompt)]
            reply["question"] = f"Zyxwv {len(body['messages'][1]['content'])} combined query?"
        return httpx.Response(200, json=openai_reply(json.dumps(reply)))

    router["openai"].side_effect = handler
    r = generate_with_llm(TASKS, settings=_settings(tmp_path), n=6, multi_hop=3, unanswerable=0, check_retrieval=False,
                          max_overlap=1.0, duplicate_ratio=1.01)
    assert {s["rel_path"].split("/")[0] for s in r.config["sample"]} and len(r.config["sample"]) == 6
    assert len({s["rel_path"].split("/")[0] for s in r.config["sample"]}) >= 3  # spread over folders
    assert r.report["written_by_pattern"]["llm_multi_hop"] == 3
    assert check_anchors(r.cases, corpus_from_vault(TASKS)) == []
    for c in r.cases:
        if c["category"] == "multi_hop":
            assert {s["rel_path"] for s in c["gold_supports"]} and c["required_support_groups"] == [[0, 1]]

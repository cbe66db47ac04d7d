"""`--send-scope collection` sends a case's collection (issue 30 item 5; seed 002's
`{query, collection}` inputs): the GNO importer keeps `collection`, and the request carries
it as `options.collection`, the contract's free options, as GNO's search takes it.

regression: issue 30 item 5 — `collection` was imported as a tag and never sent.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from evalkit.config import RunSettings, build_settings
from evalkit.errors import BadConfig, BadEvalSet
from evalkit.evalset.load import load_eval_set
from evalkit.interop.importers import import_cases
from evalkit.interop.importers.base import ImportOptions
from evalkit.interop.importers.docids import load_docid_map
from evalkit.interop.importers.output import write_eval_set
from evalkit.run.records import build_request
from tests.support import eval_case

# Seed 002, "Test Data Format", evals/fixtures/queries.json, verbatim (two queries, collection "contracts").
SEED_002_QUERIES = Path(__file__).parents[1] / "data" / "gno" / "queries.json"

# A Python target that writes down every request it gets (and says it honours no option).
BOT = textwrap.dedent(
    """
    import json, pathlib

    LOG = pathlib.Path(__file__).with_name("requests.jsonl")

    def ask(request):
        with LOG.open("a") as f:
            f.write(json.dumps(request) + "\\n")
        chunk = {"chunk_id": "t1", "rel_path": "contracts/termination.md", "heading_path": "# Doc", "text": "x", "rank": 1}
        return {"answer": "an answer", "references": [], "abstained": False,
                "debug": {"retrieved_chunks": [chunk], "ignored_options": sorted(request["options"])}}
    """
)


@pytest.mark.parametrize(
    ("given", "stored", "parts"),
    [
        pytest.param("none", "none", set(), id="none"),
        pytest.param("both", "both", {"vaults", "folders"}, id="both-as-before"),  # stored as before: same config_hash
        pytest.param("collection", "collection", {"collection"}, id="collection"),
        pytest.param("folders,collection", "folders+collection", {"folders", "collection"}, id="combined"),
        pytest.param(["vaults", "folders", "collection"], "both+collection", {"vaults", "folders", "collection"}, id="all"),
    ],
)
def test_send_scope_forms(given, stored: str, parts: set[str]) -> None:
    s = build_settings({"send_scope": given})
    assert (s.send_scope, set(s.scope_sent)) == (stored, parts)
    assert s.hashed()["send_scope"] == stored


def test_unknown_scope_is_refused_with_the_choices() -> None:
    with pytest.raises(BadConfig, match=r"--send-scope: unknown scope 'collections'; expected none, vaults, folders"):
        build_settings({"send_scope": "collections"})


CONTRACTS = {"question": "termination clause", "vaults": ["v"], "folders": ["contracts"]}


def test_build_request_sends_the_collection_only_when_asked() -> None:
    case = eval_case("q1", **CONTRACTS, collection="contracts")
    assert build_request(case, RunSettings()).options == {}
    assert build_request(case, RunSettings(send_scope="folders")).options == {}
    req = build_request(case, RunSettings(send_scope="collection", params={"bm25_k1": 1.5}))
    assert req.options == {"bm25_k1": 1.5, "collection": "contracts"}
    assert (req.vaults, req.folders) == ([], [])  # the collection alone
    req = build_request(case, RunSettings(send_scope="folders,collection"))
    assert (req.folders, req.options) == (["contracts"], {"collection": "contracts"})
    # a case without a collection sends none: no filter
    assert build_request(eval_case("q1", **CONTRACTS), RunSettings(send_scope="collection")).options == {}


def test_a_collection_that_is_not_a_name_is_an_eval_set_problem(tmp_path: Path) -> None:
    path = tmp_path / "es.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "q?", "answerable": False, "collection": ["a"]}) + "\n")
    with pytest.raises(BadEvalSet, match=r"es.jsonl:1: collection: expected a collection name \(a non-empty string\), got \['a'\]"):
        load_eval_set([path], extra_categories=())


def test_imported_gno_cases_send_their_collection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.run.api import run_eval

    monkeypatch.chdir(tmp_path)
    (tmp_path / "docids.tsv").write_text("docid\trel_path\n#a1b2c3\tcontracts/termination.md\n#d4e5f6\tcontracts/notice.md\n"
                                         "#g7h8i9\tcontracts/misc.md\n")
    cases = import_cases("gno", [SEED_002_QUERIES], ImportOptions(docid_map=load_docid_map(tmp_path / "docids.tsv")))
    write_eval_set(cases, tmp_path / "eval_set.jsonl", extra_categories=[])
    (tmp_path / "bot.py").write_text(BOT, encoding="utf-8")
    notes: list[str] = []

    class Progress:
        def note(self, message: str, details: list[str]) -> None:
            notes.append(message)

        def start(self, **kw: object) -> None: ...
        def advance(self, *a: object, **kw: object) -> None: ...
        def close(self) -> None: ...

    log = tmp_path / "requests.jsonl"
    result = run_eval(eval_set=str(tmp_path / "eval_set.jsonl"), target=f"python:{tmp_path / 'bot.py'}:ask",
                      retrieval_only=True, results_dir=str(tmp_path / "results"), send_scope="collection",
                      progress=Progress())
    sent = [json.loads(x) for x in log.read_text().splitlines()]
    # the probe's request (the first case's), then one per case: each with the case's collection
    assert [r["options"] for r in sent] == [{"collection": "contracts"}] * 3
    assert [r["vaults"] for r in sent] == [[]] * 3  # nothing else of the scope
    cfg = json.loads((result.run_dir / "config.json").read_text())
    assert cfg["hashed"]["send_scope"] == "collection"
    # the target said it ignores the option: said once, in the collection's words
    assert any("ignores the case's collection (options.collection" in n for n in notes)
    assert not any("--param collection" in n for n in notes)

    log.unlink()
    run_eval(eval_set=str(tmp_path / "eval_set.jsonl"), target=f"python:{tmp_path / 'bot.py'}:ask",
             retrieval_only=True, results_dir=str(tmp_path / "results"), no_probe=True)
    assert [json.loads(x)["options"] for x in log.read_text().splitlines()] == [{}, {}]  # not sent by default

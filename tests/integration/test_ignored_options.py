"""A knob a target ignores is reported (issue 28 item 5): the reference chatbot honours its BM25
settings per request and names the options it does not know in `debug.ignored_options`, and
run_eval says so before the first case. Before, `--param bm25_k1=2.0 --param top_k_rerank=3`
gave a run identical to the default one, without a word."""

from __future__ import annotations

import json
from pathlib import Path

from evalkit.reference.chatbot import ReferenceChatbot
from tests.support import run_eval_cli

ROOT = Path(__file__).resolve().parents[2]


BUNDLED = {"eval_set": ROOT / "eval_set.jsonl", "vault": ROOT / "sample_vault", "retrieval_only": True, "json": True}


def test_unknown_options_are_named_and_bm25_options_change_the_retrieval(tmp_path: Path) -> None:
    base = run_eval_cli(**BUNDLED, results_dir=tmp_path, run_id="base")
    assert base.exit_code == 0 and "ignores --param" not in base.stderr
    tuned = run_eval_cli(**BUNDLED, results_dir=tmp_path, run_id="tuned",
                         params={"bm25_k1": 0.2, "bm25_b": 0.0, "top_k_rerank": 3})
    assert tuned.exit_code == 0, tuned.output
    assert "the target ignores --param top_k_rerank" in tuned.stderr  # and only that one
    assert "bm25_k1" not in tuned.stderr.split("ignores --param", 1)[1].splitlines()[0]

    def versions_and_rankings(run_id: str):
        recs = [json.loads(line) for line in (tmp_path / run_id / "results.jsonl").read_text().splitlines()]
        return recs[0]["config"]["retriever_version"], [[c["chunk_id"] for c in r["retrieved_chunks"]] for r in recs]

    v_base, r_base = versions_and_rankings("base")
    v_tuned, r_tuned = versions_and_rankings("tuned")
    assert "bm25(k1=0.2,b=0.0)" in v_tuned and "bm25(k1=1.2,b=0.75)" in v_base
    assert r_tuned != r_base  # the settings were used, not ignored


def test_the_chatbot_scores_with_the_requested_bm25_settings() -> None:
    # By hand: BM25 with k1 = 0 ignores term frequency (every matching term scores its idf), so
    # the top score equals that of an index built with k1 = 0 from the start.
    bot = ReferenceChatbot(ROOT / "sample_vault")
    req = {"question": "home server port", "k": 3, "debug": True}
    default = bot.ask(req)
    tuned = bot.ask({**req, "options": {"bm25_k1": 0.0, "unknown": 1}})
    assert tuned["debug"]["ignored_options"] == ["unknown"] and default["debug"]["ignored_options"] == []
    from evalkit.reference.chatbot import ReferenceConfig

    k1_zero = ReferenceChatbot(ROOT / "sample_vault", config=ReferenceConfig(bm25_k1=0.0))
    assert [c["chunk_id"] for c in tuned["debug"]["retrieved_chunks"]] == [
        c["chunk_id"] for c in k1_zero.ask(req)["debug"]["retrieved_chunks"]
    ]
    assert [c["score_lexical"] for c in tuned["debug"]["retrieved_chunks"]] == [
        c["score_lexical"] for c in k1_zero.ask(req)["debug"]["retrieved_chunks"]
    ]

"""The run log: the keys of a run folder's three files, spelled once.

A run folder holds results.jsonl (one record per case and trial), metrics.json (what the
derive computes from the records: `evalkit.derive`) and config.json (every parameter of the
run). `evalkit.store.runs.RunDir` is their one reader and writer (streamed records,
atomic writes, the one-update commit); this module is the one place their keys are
spelled. Every other module names a key through these classes (`rec[Rec.CASE_ID]`,
`metrics[Met.AGGREGATE]`, `cell[Cell.AT_K]`), so a key is renamed, found or documented in
one place. tests/unit/test_run_log_keys.py holds the rest of evalkit to it.

Inside the library records and metrics travel as plain dicts (orjson in, orjson out: the
hot paths read a key per field per record, and a model per record would cost more than
the work); the pydantic models in `evalkit.schema` (ResultRecord, Metrics, RunConfig) are
the same shapes for validating at the edges and for the JSON schema the docs show.

The names are the seeds' where the seeds name a field (seed 000 "Results JSONL Format" and
"Metrics JSON Format": `test_case_id`, `aggregate_metrics`, `recall_at_k` ...); EVAL.md
says what each means.
"""

from __future__ import annotations

__all__ = ["Cell", "Cfg", "Holder", "Met", "Rec", "RecConfig", "Rm", "Verdict"]


class Rec:
    """A results.jsonl record: one case (and trial) as run."""

    SCHEMA_VERSION = "schema_version"
    CASE_ID = "test_case_id"
    CASE_INDEX = "case_index"  # the case's position in the eval set
    TRIAL = "trial"  # 1-based, on a --trials run
    CASE = "case"  # the eval case as run (labels, tags, category ...)
    QUESTION = "question"
    ANSWER = "answer"
    ANSWER_TRUNCATED = "answer_truncated"
    ANSWER_CHARS = "answer_chars"
    REFERENCES = "references"
    REFERENCES_DROPPED = "references_dropped"
    RETRIEVED_CHUNKS = "retrieved_chunks"
    RETRIEVED_CHUNKS_DROPPED = "retrieved_chunks_dropped"
    FOLDER_SELECTION = "folder_selection"
    CONFIG = "config"  # the per-record config snapshot (RecConfig)
    INDEXING_COVERAGE = "indexing_coverage"
    LATENCY = "latency"
    RETRIEVAL_METRICS = "retrieval_metrics"  # Rm
    EXPECTATIONS = "expectations"
    LATENCY_BUDGET = "latency_budget"
    GROUNDEDNESS = "groundedness"  # a Verdict, or None
    CORRECTNESS = "correctness"  # a Verdict, or None
    ABSTENTION = "abstention"
    JUDGE_INPUT = "judge_input"
    COST = "cost"
    ERROR = "error"
    JUDGE_ERRORS = "judge_errors"
    MISSING_FIELDS = "missing_fields"
    HISTORY = "history"  # a conversation's turn: the earlier turns it was sent (DESIGN.md §10)
    ATTEMPTS = "attempts"
    TRACES = "traces"  # the target's debug.traces steps, {name, input, output}, cut and redacted
    TRACES_DROPPED = "traces_dropped"
    RESPONSE_VALIDITY = "response_validity"

    # inside `latency`
    TOTAL_MS = "total_ms"
    # inside `error`
    KIND = "kind"
    # inside `abstention`
    ABSTAINED = "abstained"
    HALLUCINATED = "hallucinated"
    # inside `cost`
    JUDGE_TOKENS = "judge_tokens"
    JUDGE_COST_USD = "judge_cost_usd"

    # The judges' verdict keys, in report order: each judge writes the key of its name.
    JUDGED = (GROUNDEDNESS, CORRECTNESS)


class Verdict:
    """A judge's verdict in a record (`groundedness`, `correctness`)."""

    SCORE = "score"
    REASONING = "reasoning"
    JUDGE = "judge"  # which judge made it (judges/provenance.py)


class Rm:
    """A record's `retrieval_metrics` (`score_case_retrieval`). The seed's plain names
    (`recall_at_k` ...) hold the primary K's values; `at_k` holds every K's by registry name."""

    K = "k"  # the primary K
    AT_K = "at_k"  # {str(K): {recall_any, recall_all, recall_frac, precision, mrr, ndcg}}
    STATUS = "status"  # "scored" | "unanswerable" | "unlabeled"
    SCOPE_MISS = "scope_miss"
    ATTRIBUTION_HIT = "attribution_hit"
    RECENCY = "recency"
    GOLD_HIT = "gold_hit"
    FIRST_MATCH_RANK = "first_match_rank"
    N_GOLD = "n_gold"


class RecConfig:
    """A record's `config` snapshot (seed 000 "Results JSONL Format" -> config)."""

    K = "k"
    KS = "ks"
    DATASET_VERSION = "dataset_version"


class Met:
    """metrics.json, top level."""

    SCHEMA_VERSION = "schema_version"
    RUN_ID = "run_id"
    TIMESTAMP = "timestamp"
    CONFIG_HASH = "config_hash"
    EVAL_SET_COMMIT_HASH = "eval_set_commit_hash"
    DATASET_VERSION = "dataset_version"  # the labels the per-case values are scored with
    CASES_VERSION = "cases_version"
    KS = "ks"  # the cut-offs the per-case values hold, primary first
    SEED = "seed"
    AGGREGATE = "aggregate_metrics"  # the overall Cell
    CONVERSATIONS = "conversations"  # metrics/conversations.py, for a run of conversations
    BY_TAG = "by_tag"
    BY_CATEGORY = "by_category"
    BY_DIFFICULTY = "by_difficulty"
    BY_DOMAIN = "by_domain"
    BY_ANSWERABLE = "by_answerable"
    BY_LANGUAGE = "by_language"
    BY_SCENARIO = "by_scenario"
    BY_TURN = "by_turn"  # a conversation's turns: "first" or "follow-up" (DESIGN.md §10)
    BY_FOLLOW_UP = "by_follow_up"  # a turn's kind, as the eval set's `follow_up` says
    TOTAL_TESTS = "total_tests"
    ANSWERABLE_TESTS = "answerable_tests"
    UNANSWERABLE_TESTS = "unanswerable_tests"
    RUN_TIMING = "run_timing"
    TRIALS = "trials"
    INVARIANTS = "invariants"
    WARNINGS = "warnings"
    GATE = "gate"
    THRESHOLDS = "thresholds"
    SUITE = "suite"
    RETRIEVAL_SCORING = "retrieval_scoring"
    ABSTENTION_SCORING = "abstention_scoring"

    # The slices, one Cell per group, in metrics.json's order.
    GROUPINGS = (BY_TAG, BY_CATEGORY, BY_DIFFICULTY, BY_DOMAIN, BY_ANSWERABLE, BY_LANGUAGE, BY_SCENARIO, BY_TURN,
                 BY_FOLLOW_UP)


class Cell:
    """A metrics.json cell (`aggregate_metrics`, or one group of a `by_*` slice): the
    registry's metric keys (evalkit.metrics.registry) and these."""

    K = "k"  # the primary K
    AT_K = "at_k"  # {str(K): {metric: value, "n": {...}}}
    N = "n"  # {metric: how many cases its mean is over}
    N_CASES = "n_cases"
    LATENCY = "latency"
    OPERATIONAL = "operational_metrics"
    JUDGE = "judge"  # the judges' statistics (aggregate only)
    JUDGE_RELIABILITY = "judge_reliability"  # judge_answers' spot check (aggregate only)
    JUDGE_BIAS = "judge_bias"  # judge_answers' bias probes (aggregate only)
    JUDGE_AGREEMENT = "judge_agreement"  # against human grades (aggregate only)
    JUDGE_PPI = "judge_ppi"  # judge means corrected by human grades, PPI++ (aggregate only)
    INDEXING_COVERAGE = "indexing_coverage"
    COST = "cost"


class Cfg:
    """config.json, top level."""

    SCHEMA_VERSION = "schema_version"
    RUN_ID = "run_id"
    CREATED_AT = "created_at"
    CONFIG_HASH = "config_hash"
    HASHED = "hashed"  # what config_hash is the hash of
    SETTINGS = "settings"  # RunSettings, as given
    SESSIONS = "sessions"  # one entry per run_eval session (wall_s, stopped ...)
    EVAL_SET = "eval_set"  # paths, version, cases_version, gold_forms, n_cases ...
    DATASET_VERSION = "dataset_version"
    EVAL_SET_COMMIT_HASH = "eval_set_commit_hash"
    JUDGE = "judge"
    SCORER = "scorer"
    TARGET = "target"
    SUITE = "suite"

    # inside `sessions[]`
    WALL_S = "wall_s"
    # inside `eval_set`
    PATHS = "paths"
    GOLD_FORMS = "gold_forms"


class Holder:
    """`.writer.lock`, the run's writer lock (`RunDir.writer`): who holds the run, while it
    does; empty once released (a killed holder leaves its entry, and the lock is free)."""

    COMMAND = "command"  # the job: run_eval, judge_answers, score_retrieval ...
    ARGV = "argv"  # the command line as typed (secrets scrubbed, cut to 300 characters)
    PID = "pid"
    HOST = "host"
    STARTED_AT = "started_at"  # UTC, ISO 8601, to the second

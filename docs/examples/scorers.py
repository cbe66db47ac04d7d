"""Python scorers: `evalkit score --run-id RUN --scorer python:docs/examples/scorers.py:cites_a_note`.

A scorer gets the record (a results.jsonl line, as a dict) and returns a number on its scale
(default [0, 1]), a bool, or None when it does not apply (not scored, never a 0).
"""


def cites_a_note(record):
    """1 when the answer cites at least one of the references it returned, else 0."""
    if not record.get("answer"):
        return None
    return bool(record.get("references")) and "[" in record["answer"]

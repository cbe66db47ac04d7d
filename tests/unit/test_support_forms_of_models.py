"""CaseIdentity reads a GoldSupport's forms off its field dict (load.py): the same forms as
support_forms of the model, over every combination of the fields it reads."""

from __future__ import annotations

import itertools

from pydantic import ValidationError

from evalkit.evalset.anchors import support_forms
from evalkit.evalset.load import CaseIdentity
from evalkit.schema import EvalCase, GoldSupport

VALUES = {
    "chunk_id": [None, "", "c1"],
    "rel_path": [None, "", "a.md", "./"],
    "start_line": [None, 3],
    "end_line": [None, 5],
    "heading_path": [None, "", "# H"],
    "snippets": [[], [" "], ["x"]],
}


def _supports() -> list[GoldSupport]:
    out = []
    for combo in itertools.product(*VALUES.values()):
        try:
            out.append(GoldSupport.model_validate(dict(zip(VALUES, combo))))
        except ValidationError:
            continue  # not a support the eval set accepts
    return out


def test_a_models_field_dict_has_its_forms() -> None:
    supports = _supports()
    assert len(supports) > 100
    for s in supports:
        assert support_forms(s.__dict__) == support_forms(s)


def test_gold_forms_are_those_of_the_models() -> None:
    supports = _supports()
    identity = CaseIdentity()
    identity.add(EvalCase(id="c", question="q", answerable=True, gold_supports=supports))
    assert identity.gold_forms == sorted(set().union(*map(support_forms, supports)))

"""Containers the target declares it refuses (`rejected_forms`, R-ERR-1, R-ERR-9): inputs in
the target's own terms that NumPy cannot express (a strided nested tensor, say)."""

from __future__ import annotations

import pytest

from .compare import names_field, outcome
from .strategies import Batch
from .under_test import RuleViolation, needs, target

TARGET = target()


ERROR_OF_RULE = {"R-ERR-1": TypeError, "R-ERR-9": ValueError}


@needs("rejected_forms")
@pytest.mark.rules("R-ERR-1", "R-ERR-9")
@pytest.mark.parametrize("form", tuple(getattr(TARGET, "rejected_forms", {})) or ("none",))
def test_container_the_target_refuses(form: str) -> None:
    """A container the target declares it refuses (a strided nested tensor: not a batch form,
    R-ERR-1; the ragged dimension last: arrays whose first dimension is not the length,
    R-ERR-9): the rule's error class, the message naming what is wrong."""
    if form == "none":
        pytest.skip("the target declares no refused container")
    rule, word = TARGET.rejected_forms[form]
    seqs = Batch((3, 5), trail=(2,), dtype="float32").arrays()
    got = outcome(lambda: TARGET.pack_as(form, seqs, {"cp_size": 2}, 0))
    what = f"pack_as({form!r})"
    if not isinstance(got, ERROR_OF_RULE[rule]):
        raise RuleViolation(f"{what}: expected {ERROR_OF_RULE[rule].__name__}, got {got!r}",
                            {rule})
    if not names_field(word, str(got)):
        raise RuleViolation(f"{what}: the message {str(got)!r} does not name {word!r}",
                            {rule})

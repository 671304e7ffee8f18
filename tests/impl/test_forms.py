"""impl's batch containers beyond a list of arrays (R-IN-1): nested tensors, flat values with
`lengths=`, a padded batch with a mask (at storage offsets too), tensor subclasses, through the
suite's comparisons; the containers and `lengths=` impl must refuse (R-ERR-*); arrays the
caller keeps (R-IN-6).

No other packer takes these containers, so they are checked here against `_impl_api.IMPL`,
not by the suite (conformance/)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from thd_packing import reference
from thd_packing.conformance.compare import (
    check_meta,
    check_positions,
    check_rows,
    names_field,
    names_item,
    outcome,
    same_value,
)
from thd_packing.conformance.running import (
    RankResult,
    call_target,
    readable_output,
    run_reference,
    valid_input_rules,
)
from thd_packing.conformance.strategies import INT32_MAX, Batch, PackCase, pack_cases
from thd_packing.conformance.under_test import RuleViolation, as_tuple, assume_declared

from ._impl_api import CAPS, IMPL, ci_settings

pytestmark = pytest.mark.usefixtures("suite_target")
CONFIG = {"cp_size": 2}  # the rejection tests' config: two zigzag ranks


@pytest.mark.rules("R-IN-1", "R-IN-2", "R-ROW-1", "R-ROW-2", "R-POS-2", "R-ROLL-1")
@ci_settings(0.5)
@example(PackCase(config={"cp_size": 2}, batch=Batch((3, 0, 5), trail=(2,), dtype="float32")),
         "nested-gaps")
# the mask at storage offset 9 (a word scan must not view it as int64)
@example(PackCase(config={"cp_size": 2}, batch=Batch((3, 0, 5), trail=(2,), dtype="float32")),
         "padded-offset-9")
@given(pack_cases(caps=CAPS), st.sampled_from(IMPL.batch_forms))
def test_batch_forms_match_reference(case: PackCase, form: str) -> None:
    """R-IN-1 defines a batch as an ordered sequence of arrays, not a container type: every
    container impl takes packs to the reference's rows and position ids on every rank."""
    assume_declared(case)
    seqs = case.batch.arrays()
    got = []
    for rank in range(case.cp_size):
        what = f"pack_as({form!r}, rank {rank})"
        result = call_target(what, IMPL.pack_as, form, seqs, dict(case.config), rank,
                             need_roll=case.need_roll, pad_value=case.pad_value,
                             rules=valid_input_rules(case))
        got.append(RankResult(*readable_output(as_tuple(result, what), what)))
    want = run_reference(case, seqs)
    check_meta(got, want, case.config)
    check_rows(case, got, want)
    check_positions(case, got, want)


ERROR_OF_RULE = {"R-ERR-1": TypeError, "R-ERR-9": ValueError}


@pytest.mark.rules("R-ERR-1", "R-ERR-9")
@pytest.mark.parametrize("form", sorted(IMPL.rejected_forms))
def test_container_impl_refuses(form: str) -> None:
    """A strided nested tensor is no batch form (R-ERR-1); a jagged one whose ragged dimension
    is last has arrays whose first dimension is not the length (R-ERR-9): the rule's class, the
    message naming what is wrong."""
    rule, word = IMPL.rejected_forms[form]
    seqs = Batch((3, 5), trail=(2,), dtype="float32").arrays()
    got = outcome(lambda: IMPL.pack_as(form, seqs, CONFIG, 0))
    assert isinstance(got, ERROR_OF_RULE[rule]), f"pack_as({form!r}): {got!r}"
    assert names_field(word, str(got)), f"{got} does not name {word!r}"


T, V = TypeError, ValueError
# lengths= impl refuses: name -> (lengths, rows of values, trail, class, rule, what the message
# names besides `lengths`)
FLAT_REFUSED: dict[str, tuple[Any, int, tuple[int, ...], type[Exception], str, tuple[Any, ...]]]
FLAT_REFUSED = {
    "sum-short": ([3, 4], 8, (), V, "R-ERR-9", (8,)),
    "sum-long": ([3, 9], 8, (), V, "R-ERR-9", (8,)),
    "sum-short-trail": ([3, 4], 8, (3,), V, "R-ERR-9", (8,)),
    "sum-long-trail": ([5, 6], 8, (2, 2), V, "R-ERR-9", (8,)),
    "sum-tensor": (np.array([3, 4], np.int64), 8, (3,), V, "R-ERR-9", (8,)),
    "negative": ([9, -1], 8, (), V, "R-ERR-6", (-1,)),
    "negative-tensor": (np.array([9, -1], np.int32), 8, (3,), V, "R-ERR-6", (-1,)),
    "float-list": ([4.0, 4], 8, (), T, "R-ERR-1", ()),
    "float-tensor": (np.array([4.0, 4.0]), 8, (), T, "R-ERR-1", ()),
    "bool-list": ([True] * 8, 8, (), T, "R-ERR-1", ()),
    "bool-tensor": (np.ones(8, bool), 8, (), T, "R-ERR-1", ()),
    "str": ("44", 8, (), T, "R-ERR-1", ("str",)),
    "2-D": (np.array([[4, 4]]), 8, (), V, "R-ERR-6", ()),
    "empty-list": ([], 0, (), V, "R-ERR-7", ()),
    "empty-tensor": (np.array([], np.int64), 0, (3,), V, "R-ERR-7", ()),
    "above-int32": ([INT32_MAX + 1, -(INT32_MAX + 1) + 8], 8, (), V, "R-ERR-8", ()),
}


def _flat_values(rows: int, trail: tuple[int, ...] = ()) -> np.ndarray:
    return np.arange(rows * int(np.prod(trail)), dtype=np.int64).reshape(rows, *trail)


def _refused(what: str, call: Any, inputs: list[Any], cls: type[Exception],
             names: tuple[Any, ...], rule: str) -> None:
    """`call` raises `cls`, its message naming each of `names`, and leaves `inputs` as they
    were; a failure is `rule`'s (and R-IN-1's: these are batch containers)."""
    before = [repr(x) for x in inputs]
    got = outcome(call)
    rules = {rule, "R-IN-1"}
    if [repr(x) for x in inputs] != before:
        raise RuleViolation(f"{what}: the call changed its inputs", rules)
    if not isinstance(got, cls):
        raise RuleViolation(f"{what}: expected {cls.__name__}, got {got!r}", rules)
    missing = [n for n in names if not names_item(n, str(got))]
    if missing:
        raise RuleViolation(f"{what}: the message {str(got)!r} does not name {missing}", rules)


@pytest.mark.parametrize("name", [
    pytest.param(name, id=name, marks=pytest.mark.rules(FLAT_REFUSED[name][4], "R-IN-1"))
    for name in sorted(FLAT_REFUSED)])
def test_flat_lengths_impl_refuses(name: str) -> None:
    """pack_thd(values, lengths=...) with lengths that do not describe `values`, or of a type
    that is no integer list or array: the rule's class before any data is read, the message
    naming `lengths` and the offending value."""
    lengths, rows, trail, cls, rule, shown = FLAT_REFUSED[name]
    values = _flat_values(rows, trail)
    _refused(f"pack_flat({name})", lambda: IMPL.pack_flat(values, lengths, CONFIG, 0),
             [values, lengths], cls, ("lengths", *shown), rule)


@pytest.mark.rules("R-ERR-1", "R-ERR-9", "R-IN-1")
def test_flat_values_that_are_no_array_are_refused() -> None:
    """A list of arrays with lengths= is no flat buffer (R-ERR-1); a 0-d buffer has no rows to
    split (R-ERR-9)."""
    seqs = [np.zeros(2), np.zeros(3)]
    _refused("pack_flat(list with lengths)", lambda: IMPL.pack_flat(seqs, [2, 3], CONFIG, 0),
             [seqs], T, ("lengths", "list"), "R-ERR-1")
    scalar = np.array(5)
    _refused("pack_flat(0-d values)", lambda: IMPL.pack_flat(scalar, [1], CONFIG, 0),
             [scalar], V, ("batch|values",), "R-ERR-9")


def _check_flat(what: str, values: np.ndarray, lengths: Any, config: dict[str, Any]) -> None:
    """Every rank's rows are the reference's for the split batch, values and lengths unchanged."""
    sizes = [int(n) for n in lengths]
    seqs = np.split(values, np.cumsum(sizes)[:-1])
    cfg = reference.PackConfig(**config)
    before = (values.tobytes(), np.asarray(lengths).tobytes())
    for rank in range(cfg.cp_size):
        want, _, _ = reference.pack_thd(seqs, cfg, rank)
        try:
            rows = IMPL.pack_flat(values, lengths, dict(config), rank).rows
        except Exception as exc:  # the rejection is the failure under test
            raise RuleViolation(f"{what}, rank {rank}: a valid input, rejected: {exc!r}",
                                {"R-IN-1", "R-IN-6"}) from exc
        if not same_value(rows, want):
            raise RuleViolation(f"{what}, rank {rank}: rows differ from the spec's", {"R-ROW-1"})
        if (values.tobytes(), np.asarray(lengths).tobytes()) != before:
            raise RuleViolation(f"{what}, rank {rank}: wrote into its inputs", {"R-IN-6"})


@pytest.mark.rules("R-IN-1", "R-ROW-1")
@pytest.mark.parametrize("lengths", [[3, 0, 5], np.array([3, 0, 5], np.int32),
                                     [np.int64(3), 0, np.int16(5)]],
                         ids=["list", "int32-array", "numpy-ints"])
def test_flat_lengths_impl_takes(lengths: Any) -> None:
    """lengths= as a list, an int32 array, or a list of NumPy integers."""
    _check_flat(f"pack_flat(lengths={lengths!r})", _flat_values(8, (3,)), lengths, CONFIG)


def _locked(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.setflags(write=False)
    return a


@pytest.mark.rules("R-IN-1", "R-IN-6", "R-ROW-1")
@pytest.mark.parametrize("config", [{"cp_size": 1}, {"cp_size": 2}, {"cp_size": 2, "tp_size": 3},
                                    {"cp_size": 3, "cp_layout": "contiguous"}],
                         ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
@pytest.mark.parametrize("form", ["broadcast", "read-only"])
def test_flat_lengths_the_caller_keeps(config: dict[str, Any], form: str) -> None:
    """Read-only values with a broadcast (stride-0) or read-only `lengths` array: valid inputs,
    left as they were."""
    values = _locked(_flat_values(12, (3,)))
    lengths = (np.broadcast_to(np.int64(4), (3,)) if form == "broadcast"
               else _locked(np.array([4, 0, 8], dtype=np.int64)))
    _check_flat(f"pack_flat(lengths={form} {lengths.tolist()}, config={config})", values,
                lengths, config)

"""Bad values of spec 1.1's convention fields (R-ERR-12) and too many sequences for
max_num_seqs (R-ERR-13). A field is only asked of a target that implements it (its capability),
so a target of spec 1.0 is never asked to reject what it does not know."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference

from . import harness as h
from .rejection import BASE_CONFIG, by_class, compare_pack

# field -> (capability that implements it, invalid values: wrong types first, then values);
# valid look-alikes are mixed in (np.int64 max_num_seqs: an integer, spec section 0).
BAD_CONVENTIONS: dict[str, tuple[str, list[Any]]] = {
    "tail": ("tail_segment", [None, 1, True, b"last", "Last", "", "segments", "last "]),
    "seq_align": ("seq_align_cp", [None, 2, False, "tp", "TP_CP", "", "cp "]),
    "max_seqlen": ("static_metadata", [None, 0, True, "max", "Total", "exact "]),
    "max_num_seqs": ("static_metadata", [True, False, 1.5, 4.0, "4", [4], 0, -1,
                                          np.int64(0), np.int64(4), np.int32(3)]),
    "fp8": ("fp8_recipes", ["MXFP8", "fp8", "", "tensor ", "e4m3", "delayed", b"block"]),
    "labels": ("labels_ignore", [None, 1, True, "Ignore", "shift", ""]),
    "ignore_index": ("labels_ignore", [True, -100.0, "-100", None]),
    "fixed_total": ("fixed_total", [True, 16.0, "16", 0, -16, 2**31, 7]),
}


@h.needs("config_checks")
@pytest.mark.rules("R-IN-3", "R-ERR-1", "R-ERR-12")
@pytest.mark.parametrize("field", [
    pytest.param(f, marks=h.needs(cap)) for f, (cap, _) in sorted(BAD_CONVENTIONS.items())])
@h.prop_settings(0.5)
@given(data=st.data())
def test_reject_convention_values(field: str, data: st.DataObject) -> None:
    """tail, seq_align, max_seqlen: a str of the field's values (TypeError for any other type,
    ValueError for an unknown str); max_num_seqs: None or an integer >= 1 (bool TypeError);
    fp8: a bool or a recipe name ('MXFP8', 'e4m3': ValueError). Before any data is read, naming
    the field; the accepted look-alikes pack as the reference does."""
    value = data.draw(st.sampled_from(BAD_CONVENTIONS[field][1]), label=field)
    compare_pack([np.arange(5), np.arange(3)], {**BASE_CONFIG, field: value},
                 rules=by_class("R-ERR-12"), field=field)


# (B, max_num_seqs, tail): too many sequences, and the edges that are accepted.
COUNTS = [(3, 2, "last"), (1, 1, "segment"), (4, 4, "segment"), (9, 3, "segment"),
          (3, 3, "last"), (3, 4, "segment"), (1, 1, "last")]


def _count_params() -> list[Any]:
    out = []
    for b, n, tail in COUNTS:
        marks = [h.needs("static_metadata")] + ([h.needs("tail_segment")]
                                                if tail == "segment" else [])
        out.append(pytest.param(b, n, tail, marks=marks, id=f"B{b}-N{n}-{tail}"))
    return out


def _expect_names(b: int, n: int, tail: str, got: BaseException | None) -> None:
    """R-ERR-13: the message names max_num_seqs and its value, B, and the tail (under 'last'
    only where the target implements the field: capability `tail_segment`)."""
    if got is None:
        return
    message = str(got)
    tail_exempt = tail == "last" and "tail_segment" not in h.caps()
    missing = [what for what, ok in (
        ("max_num_seqs", h._names("max_num_seqs", message)),
        (f"max_num_seqs = {n}", h.names_number(n, message)),
        (f"B = {b}", h.names_number(b, message)),
        ("tail", tail_exempt or h._names("tail", message)))
        if not ok]
    if missing:
        raise h.RuleViolation(f"B = {b}, max_num_seqs = {n}, tail={tail!r}: the message "
                              f"{message!r} does not name {missing}", {"R-ERR-13"})


@pytest.mark.rules("R-ERR-13", "R-STATIC-1")
@pytest.mark.parametrize(("b", "n", "tail"), _count_params())
def test_reject_more_sequences_than_max_num_seqs(b: int, n: int, tail: str) -> None:
    """B > max_num_seqs is a ValueError, and under tail='segment' so is B == max_num_seqs
    (one entry is reserved for the padding segment, whatever the lengths: here T = S); B <=
    max_num_seqs (B < under 'segment') packs as the reference does."""
    seqs = [np.arange(4, dtype=np.int64) + 1000 * i for i in range(b)]  # T = S: no padding
    config = {**BASE_CONFIG, "cp_size": 1, "max_num_seqs": n, "tail": tail}
    h.require_config(config, lengths=[4] * b)
    compare_pack(seqs, config, rules={"R-ERR-13"}, field="max_num_seqs")
    _expect_names(b, n, tail, h.outcome(lambda: h.target().pack(seqs, dict(config), 0)))


@h.needs("plan")
@pytest.mark.rules("R-ERR-13")
@pytest.mark.parametrize(("b", "n", "tail"), _count_params())
def test_plan_rejects_more_sequences_than_max_num_seqs(b: int, n: int, tail: str) -> None:
    """The same from the lengths alone (plan time, no data), also for lengths no batch could
    hold (2**30 rows each: the count is checked, nothing is built)."""
    config = {**BASE_CONFIG, "cp_size": 1, "max_num_seqs": n, "tail": tail}
    h.require_config(config, lengths=[1] * b)
    for seqlens in ([4] * b, [2**30] + [1] * (b - 1)):
        want = h.outcome(lambda s=seqlens: reference.plan_thd(s, reference.PackConfig(**config)))
        got = h.outcome(lambda s=seqlens: h.target().plan(s, dict(config)))
        h.check_same_rejection(want, got, f"plan({seqlens[:3]}..., {config})", {"R-ERR-13"},
                               ("max_num_seqs",))
        _expect_names(b, n, tail, got)


@h.needs("static_metadata", "config_checks")
@pytest.mark.rules("R-ERR-12")
@pytest.mark.parametrize("value", [2**31, 2**40], ids=["2^31", "2^40"])
def test_reject_max_num_seqs_above_int32(value: int) -> None:
    """max_num_seqs above INT32_MAX is a ValueError when the config is built, before any plan
    of that many entries is allocated (int32 cu_seqlens could not index them). Not run on a
    target with `max_rows`: one without the check would allocate the entries."""
    h.require_rows(value, f"max_num_seqs={value}")
    compare_pack([np.arange(5), np.arange(3)], {**BASE_CONFIG, "max_num_seqs": value},
                 rules={"R-ERR-12"}, field="max_num_seqs")


@h.needs("config_checks", "need_roll", "labels_ignore")
@pytest.mark.rules("R-ERR-16", "R-LABEL-2")
@pytest.mark.parametrize(("dtype", "ignore"), [("uint8", -100), ("bool", -100), ("int8", 300),
                                               ("uint8", 255), ("bool", 1)])
def test_reject_ignore_index_outside_the_dtype(dtype: str, ignore: int) -> None:
    """need_roll under labels='ignore': an ignore_index the batch's dtype cannot hold is a
    ValueError naming ignore_index, before any data is read; one it holds packs as the spec."""
    seqs = [np.arange(5).astype(dtype), np.arange(3).astype(dtype)]
    compare_pack(seqs, {**BASE_CONFIG, "labels": "ignore", "ignore_index": ignore},
                 need_roll=True, rules={"R-ERR-16"}, field="ignore_index")

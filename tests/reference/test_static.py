"""The reference under spec 1.1's static metadata (max_num_seqs, max_seqlen) and the new
config fields' rejections (R-ERR-1, R-ERR-12, R-ERR-13).

Expected values come from the spec text: a plan with max_num_seqs = N is the plan without it,
its arrays extended by zero-length entries (and, under tail="segment", the padding segment's
entry B kept even when empty); nothing here calls reference/segments.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thd_packing import reference as ref

FAST = settings(
    max_examples=80,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

BASE = st.fixed_dictionaries({
    "tp_size": st.integers(1, 3),
    "cp_size": st.integers(1, 4),
    "cp_layout": st.sampled_from(["zigzag", "contiguous"]),
    "fp8": st.sampled_from([False, True, "mxfp8"]),
    "bucket": st.none() | st.integers(1, 40),
    "min_local_rows": st.none() | st.integers(1, 30),
    "tail": st.sampled_from(["last", "segment"]),
    "seq_align": st.sampled_from(["tp_cp", "cp"]),
})
LENGTHS = st.lists(st.integers(0, 30), min_size=1, max_size=6)


def _batch(lengths: list[int]) -> list[np.ndarray]:
    return [np.arange(n, dtype=np.int64) + (i + 1) * 10**6 for i, n in enumerate(lengths)]


@FAST
@given(base=BASE, lengths=LENGTHS, spare=st.integers(0, 4))
def test_max_num_seqs_fixes_the_array_shapes(base: dict[str, Any], lengths: list[int],
                                             spare: int) -> None:
    """R-STATIC-1, R-META-1..3, R-META-7, R-TAIL-1: K = N entries whatever B; past the real
    content every entry is zero-length at the end of the buffer; under tail="segment" entry B
    is the padding segment (P = T - S, possibly 0). Total and rows do not change."""
    b = len(lengths)
    n = b + spare + (1 if base["tail"] == "segment" else 0)
    free = ref.plan_thd(lengths, ref.PackConfig(**base))
    plan = ref.plan_thd(lengths, ref.PackConfig(**base, max_num_seqs=n))
    assert plan.num_seqs == plan.batch_size == b
    assert len(plan.seqlens) == len(plan.seqlens_padded) == n
    assert len(plan.cu_seqlens) == len(plan.cu_seqlens_padded) == n + 1
    assert plan.total == free.total and plan.local_rows == free.local_rows
    padded = free.seqlens_padded.tolist()[:b]
    if base["tail"] == "segment":
        padded.append(free.total - sum(padded))  # entry B, even when it has no rows
    else:
        padded = free.seqlens_padded.tolist()
    padded += [0] * (n - len(padded))
    assert plan.seqlens_padded.tolist() == padded
    assert plan.seqlens.tolist() == lengths + [0] * (n - b)
    # The entries past the content are empty and at the end: their offsets all equal T.
    assert plan.cu_seqlens_padded.tolist() == np.concatenate([[0], np.cumsum(padded)]).tolist()
    assert plan.cu_seqlens.tolist() == np.concatenate([[0], np.cumsum(plan.seqlens)]).tolist()
    assert plan.max_seqlen == free.max_seqlen  # zero-length entries change no maximum
    seqs = _batch(lengths)
    shards = []
    for rank in range(base["cp_size"]):
        rows, pos, _ = ref.pack_thd(seqs, ref.PackConfig(**base, max_num_seqs=n), rank)
        rows0, pos0, _ = ref.pack_thd(seqs, ref.PackConfig(**base), rank)
        assert np.array_equal(rows, rows0) and np.array_equal(pos, pos0)
        shards.append(rows)
    out = ref.unpack_thd(shards, plan, ref.PackConfig(**base, max_num_seqs=n))
    assert len(out) == b  # R-UNPACK-1: the B real sequences, not N
    assert all(np.array_equal(x, y) for x, y in zip(out, seqs, strict=True))


@FAST
@given(base=BASE, lengths=LENGTHS)
def test_max_seqlen_policy(base: dict[str, Any], lengths: list[int]) -> None:
    """R-META-4, R-STATIC-2, R-CONSUMER-9: "exact" is max(P_k) over all segments (the padding
    segment included), "total" is T; both bound every segment."""
    exact = ref.plan_thd(lengths, ref.PackConfig(**base))
    total = ref.plan_thd(lengths, ref.PackConfig(**base, max_seqlen="total"))
    assert exact.max_seqlen == max(exact.seqlens_padded.tolist())
    assert total.max_seqlen == total.total == exact.total
    assert isinstance(exact.max_seqlen, int) and isinstance(total.max_seqlen, int)
    assert total.seqlens_padded.tolist() == exact.seqlens_padded.tolist()


@pytest.mark.parametrize("tail", ["last", "segment"])
@pytest.mark.parametrize("lengths", [[0, 0, 0], [5, 7, 1], [40, 0, 3]])
def test_too_many_sequences(tail: str, lengths: list[int]) -> None:
    """R-ERR-13: B > max_num_seqs raises ValueError, and under tail="segment" so does
    B == max_num_seqs, whatever the lengths (with or without tail rows); the message names
    max_num_seqs, B and tail. One entry more is accepted."""
    b = len(lengths)
    too_small = [b - 1, b] if tail == "segment" else [b - 1]
    for n in too_small:
        with pytest.raises(ValueError) as caught:
            ref.plan_thd(lengths, ref.PackConfig(cp_size=2, tail=tail, max_num_seqs=n))
        message = str(caught.value)
        assert f"max_num_seqs={n}" in message and f"B={b}" in message and tail in message
        with pytest.raises(ValueError):
            ref.pack_thd(_batch(lengths), ref.PackConfig(cp_size=2, tail=tail, max_num_seqs=n),
                         0)
    fits = too_small[-1] + 1
    plan = ref.plan_thd(lengths, ref.PackConfig(cp_size=2, tail=tail, max_num_seqs=fits))
    assert len(plan.seqlens) == fits


@FAST
@given(base=BASE, batches=st.lists(LENGTHS, min_size=2, max_size=6), spare=st.integers(0, 3))
def test_value_set_with_bucket_and_static_metadata(base: dict[str, Any],
                                                   batches: list[list[int]],
                                                   spare: int) -> None:
    """R-STATIC-3: with a bucket, max_num_seqs = N and max_seqlen="total", every int of a plan
    is a function of T alone, T is a multiple of M, and every array has N or N + 1 entries;
    so batches whose totals meet in one bucket give one graph key."""
    base = {**base, "bucket": base["bucket"] or 16}
    n = max(len(b) for b in batches) + 1 + spare
    config = ref.PackConfig(**base, max_num_seqs=n, max_seqlen="total")
    keys = {}
    for lengths in batches:
        plan = ref.plan_thd(lengths, config)
        assert plan.total % config.total_modulus == 0 and plan.total % base["bucket"] == 0
        assert plan.local_rows == plan.total // base["cp_size"] and plan.max_seqlen == plan.total
        shapes = (len(plan.seqlens), len(plan.seqlens_padded), len(plan.cu_seqlens),
                  len(plan.cu_seqlens_padded))
        assert shapes == (n, n, n + 1, n + 1)
        key = (shapes, plan.local_rows, plan.max_seqlen)
        assert keys.setdefault(plan.total, key) == key  # one key per total, whatever the batch


CONFIG_FAULTS: list[tuple[str, Any, type[Exception]]] = [
    ("fp8", "True", ValueError),
    ("fp8", "fp8", ValueError),
    ("fp8", "MXFP8", ValueError),
    ("fp8", "", ValueError),
    ("fp8", 1, TypeError),
    ("fp8", None, TypeError),
    ("fp8", b"mxfp8", TypeError),
    ("fp8", np.bool_(True), TypeError),
    ("tail", None, TypeError),
    ("tail", 1, TypeError),
    ("tail", True, TypeError),
    ("tail", "first", ValueError),
    ("tail", "Last", ValueError),
    ("tail", "", ValueError),
    ("seq_align", None, TypeError),
    ("seq_align", 2, TypeError),
    ("seq_align", "tp", ValueError),
    ("seq_align", "tp*cp", ValueError),
    ("max_num_seqs", True, TypeError),
    ("max_num_seqs", np.bool_(False), TypeError),
    ("max_num_seqs", 4.0, TypeError),
    ("max_num_seqs", "4", TypeError),
    ("max_num_seqs", 0, ValueError),
    ("max_num_seqs", -3, ValueError),
    ("max_seqlen", None, TypeError),
    ("max_seqlen", 4096, TypeError),
    ("max_seqlen", "bucket", ValueError),
    ("max_seqlen", "Exact", ValueError),
]


@pytest.mark.parametrize(("field", "value", "error"), CONFIG_FAULTS)
def test_config_rejects_1_1_fields(field: str, value: Any, error: type[Exception]) -> None:
    """R-IN-3, R-ERR-1, R-ERR-12: a wrong type is TypeError, a value the field does not define
    ValueError, both naming the field and the value."""
    with pytest.raises(error) as caught:
        ref.PackConfig(**{field: value})
    assert type(caught.value) is error
    message = str(caught.value)
    assert field in message
    assert repr(value) in message or str(value) in message


@pytest.mark.parametrize("fields", [
    {"fp8": "tensor"}, {"fp8": "mxfp8"}, {"fp8": "block"}, {"fp8": "nvfp4"},
    {"tail": "segment"}, {"seq_align": "cp"}, {"max_num_seqs": np.int16(3)},
    {"max_seqlen": "total"},
])
def test_config_accepts_1_1_values(fields: dict[str, Any]) -> None:
    """R-IN-3: every value the fields define; integer-like max_num_seqs normalised to int."""
    config = ref.PackConfig(**fields)
    for field, value in fields.items():
        got = getattr(config, field)
        assert got == value and type(got) is type(value if not isinstance(value, np.integer)
                                                   else 0)


def test_unpack_rejects_a_forged_num_seqs() -> None:
    """R-ERR-11 (a forged plan), R-META-7: segments past num_seqs hold no real row, and
    num_seqs fits the segments; unpack raises ValueError otherwise, before reading a shard."""
    config = ref.PackConfig(cp_size=2, tail="segment", bucket=16)
    plan = ref.plan_thd([3, 5], config)  # K = 3, num_seqs = 2
    shards = [ref.pack_thd(_batch([3, 5]), config, r)[0] for r in range(2)]
    for forged in (dataclasses.replace(plan, num_seqs=4),
                   dataclasses.replace(plan, num_seqs=1)):  # segment 1 has 5 real rows
        with pytest.raises(ValueError, match="num_seqs"):
            ref.unpack_thd(shards, forged, config)
    assert len(ref.unpack_thd(shards, plan, config)) == 2


def test_plan_without_num_seqs_is_a_1_0_plan() -> None:
    """R-META-7: a Plan built by a 1.0 caller (no num_seqs) has K = B."""
    plan = ref.plan_thd([3, 0, 2], ref.PackConfig(cp_size=2))
    fields = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
    del fields["num_seqs"]
    assert ref.Plan(**fields).num_seqs == 3 == plan.num_seqs

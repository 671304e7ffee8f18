"""The verl-fsdp target: verl's real FSDP packed path, from the installed verl wheel.

Expected values are worked out by hand from verl's documented behaviour (pad_packed_inputs'
docstring: the pad is appended to the (1, total_nnz) row and its position ids restart from 0;
`_get_packed_pad_size`: the row is rounded up to the next multiple of the bucket; ulysses_pad:
the total is rounded up to a multiple of the SP size, again with position ids from 0, and each
SP rank holds one contiguous slice).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np
import pytest

from thd_packing.conformance.protocol import capabilities
from thd_packing.conformance.targets import load_target
from thd_packing.conformance.under_test import as_tuple
from thd_packing.peers.verl_fsdp import VerlFsdpTarget, segments_from_position_ids

try:
    _VERL = importlib.metadata.distribution("verl")
except importlib.metadata.PackageNotFoundError:
    _VERL = None
needs_verl = pytest.mark.skipif(
    _VERL is None, reason="verl is not installed (`nox -s conformance -- --target verl-fsdp` "
    "installs verl==0.9.1 --no-deps)")

A = np.array([11, 12, 13], dtype=np.int64)
B = np.array([21, 22], dtype=np.int64)


@pytest.fixture(scope="module")
def target() -> VerlFsdpTarget:
    return load_target("verl-fsdp")


def test_segments_from_position_ids() -> None:
    # a segment starts at each position id 0; the last one ends at the total
    assert segments_from_position_ids(np.array([0, 1, 2, 0, 1, 0])).tolist() == [0, 3, 5, 6]
    assert segments_from_position_ids(np.zeros(0, dtype=np.int64)).tolist() == [0]


@needs_verl
def test_the_code_comes_from_the_wheel(target: VerlFsdpTarget) -> None:
    assert _VERL is not None
    root = Path(str(_VERL.locate_file("verl")))
    assert Path(target.utils.__file__) == root / "workers/engine/utils.py"
    assert Path(target.ulysses.__file__) == root / "utils/ulysses.py"
    engine = root / "workers/engine/fsdp/transformer_impl.py"
    assert target.get_packed_pad_size.__code__.co_filename == str(engine)
    assert target.gather_and_unpad.__code__.co_filename == str(engine)
    assert target.version == _VERL.version


@needs_verl
def test_feature_probes(target: VerlFsdpTarget) -> None:
    assert {"contiguous", "pad_value", "unpack"} <= capabilities(target)
    for declined in ("need_roll", "fp8", "min_local_rows", "zero_length", "trailing_dims"):
        assert declined not in capabilities(target)


@needs_verl
def test_bucket_pad_is_a_trailing_segment(target: VerlFsdpTarget) -> None:
    rows, pos, meta = as_tuple(target.pack([A, B], {"bucket": 4}, 0, pad_value=-1))
    # 5 tokens -> 8 rows; the 3 pad rows are a segment of their own with positions 0, 1, 2
    assert rows.tolist() == [11, 12, 13, 21, 22, -1, -1, -1]
    assert pos.tolist() == [0, 1, 2, 0, 1, 0, 1, 2]
    assert meta["cu_seqlens_padded"].tolist() == [0, 3, 5, 8]
    assert "cu_seqlens" not in meta
    assert (meta["total"], meta["local_rows"], meta["max_seqlen"]) == (8, 8, 3)


@needs_verl
def test_no_bucket_no_padding(target: VerlFsdpTarget) -> None:
    rows, pos, meta = as_tuple(target.pack([A, B], {}, 0))
    assert rows.tolist() == [11, 12, 13, 21, 22]
    assert pos.tolist() == [0, 1, 2, 0, 1]
    assert meta["cu_seqlens_padded"].tolist() == [0, 3, 5]


@needs_verl
def test_ulysses_pad_adds_a_second_segment_and_slices(target: VerlFsdpTarget) -> None:
    config = {"cp_size": 3, "cp_layout": "contiguous", "bucket": 4}
    # 5 -> 8 (bucket, positions 0..2) -> 9 (SP 3, one more row with position 0)
    packed = [as_tuple(target.pack([A, B], config, r, pad_value=-1)) for r in range(3)]
    assert [p[0].tolist() for p in packed] == [[11, 12, 13], [21, 22, -1], [-1, -1, -1]]
    assert [p[1].tolist() for p in packed] == [[0, 1, 2], [0, 1, 0], [1, 2, 0]]
    assert packed[0][2]["cu_seqlens_padded"].tolist() == [0, 3, 5, 8, 9]
    assert packed[0][2]["local_rows"] == 3
    assert [t.tolist() for t in target.unpack([p[0] for p in packed], packed[0][2], config)] \
        == [A.tolist(), B.tolist()]


@needs_verl
def test_declined_features_raise_not_implemented(target: VerlFsdpTarget) -> None:
    for config in ({"tp_size": 2}, {"cp_size": 2}, {"fp8": True}, {"min_local_rows": 4}):
        with pytest.raises(NotImplementedError):
            as_tuple(target.pack([A, B], config, 0))
    with pytest.raises(NotImplementedError):
        as_tuple(target.pack([A, B], {}, 0, need_roll=True))
    with pytest.raises(NotImplementedError):
        as_tuple(target.pack([A, np.zeros(0, dtype=np.int64)], {}, 0))


@needs_verl
def test_convention_is_tail_segment(target: VerlFsdpTarget) -> None:
    """Spec 1.1: the target declares tail='segment'; its seqlens has one real length per
    derived segment (0 for the padding ones), num_seqs is B, and its unpack takes a plan with
    K > B entries (the reference's for tail='segment')."""
    assert target.declared.convention == {"tail": "segment", "seq_align": "none"}  # spec 1.2
    _, _, meta = as_tuple(target.pack([A, B], {"bucket": 4, "tail": "segment"}, 0))
    assert meta["seqlens"].tolist() == [3, 2, 0] and meta["num_seqs"] == 2
    plan = {"seqlens": np.array([3, 2, 0]), "num_seqs": 2, "total": 8}
    rows = np.array([11, 12, 13, 21, 22, 0, 0, 0])
    assert [t.tolist() for t in target.unpack([rows], plan, {"bucket": 4})] == [
        A.tolist(), B.tolist()]
    with pytest.raises(NotImplementedError):
        as_tuple(target.pack([A, B], {"tail": "last"}, 0))
    with pytest.raises(ValueError, match="tail"):
        as_tuple(target.pack([A, B], {"tail": "middle"}, 0))
    for config in ({"max_num_seqs": 4}, {"max_seqlen": "total"}, {"seq_align": "cp"},
                   {"seq_align": "tp_cp"}, {"fixed_total": 8}):
        with pytest.raises(NotImplementedError):
            as_tuple(target.pack([A, B], config, 0))

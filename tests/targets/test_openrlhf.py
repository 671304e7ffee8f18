"""The openrlhf target: OpenRLHF's ring-attention packing, from the installed openrlhf wheel.

Expected values are hand-computed from the behaviour documented in ring_attn_utils.py's
docstrings: the unpadded row is padded with 0 to a multiple of the ring size and sliced
contiguously (rank 0 gets [1, 2, 3], rank 1 [4, 5, 0] in its example), and the pad is added
to the last sequence's cu_seqlens entry.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np
import pytest

from thd_packing.conformance.protocol import capabilities
from thd_packing.conformance.targets import load_target
from thd_packing.conformance.under_test import as_tuple
from thd_packing.peers.openrlhf import OpenRLHFTarget

try:
    _DIST = importlib.metadata.distribution("openrlhf")
except importlib.metadata.PackageNotFoundError:
    _DIST = None
pytestmark = pytest.mark.skipif(
    _DIST is None, reason="openrlhf is not installed (`nox -s conformance -- --target openrlhf` "
    "installs openrlhf==0.11.2 --no-deps)")

CONTIGUOUS2 = {"cp_size": 2, "cp_layout": "contiguous"}


@pytest.fixture(scope="module")
def target() -> OpenRLHFTarget:
    return load_target("openrlhf")


def test_the_code_comes_from_the_wheel(target: OpenRLHFTarget) -> None:
    assert _DIST is not None
    expected = Path(str(_DIST.locate_file("openrlhf/models/ring_attn_utils.py")))
    assert Path(target.ring.__file__) == expected
    assert target.ring.unpad_and_slice_tensor.__code__.co_filename == str(expected)
    assert {"contiguous", "unpack"} <= capabilities(target)


def test_docstring_example(target: OpenRLHFTarget) -> None:
    seqs = [np.array([1, 2, 3]), np.array([4, 5])]
    packed = [as_tuple(target.pack(seqs, CONTIGUOUS2, r)) for r in range(2)]
    assert [p[0].tolist() for p in packed] == [[1, 2, 3], [4, 5, 0]]
    assert [p[1].tolist() for p in packed] == [[0, 1, 2], [0, 1, 0]]  # pad positions 0
    meta = packed[0][2]
    assert meta["cu_seqlens_padded"].tolist() == [0, 3, 6]  # the pad on the last sequence
    assert (meta["total"], meta["local_rows"]) == (6, 3)
    out = target.unpack([p[0] for p in packed], meta, CONTIGUOUS2)
    assert [o.tolist() for o in out] == [[1, 2, 3], [4, 5]]


def test_zero_length_sequences_keep_their_segment(target: OpenRLHFTarget) -> None:
    seqs = [np.array([7]), np.zeros(0, dtype=np.int64)]
    rows, _, meta = as_tuple(target.pack(seqs, CONTIGUOUS2, 0))
    # 1 token -> 2 rows; the pad goes onto the last (empty) sequence
    assert meta["cu_seqlens_padded"].tolist() == [0, 1, 2]
    assert rows.tolist() == [7]


def test_declined_features_raise_not_implemented(target: OpenRLHFTarget) -> None:
    seqs = [np.array([1, 2])]
    for config in ({"tp_size": 2}, {"cp_size": 2}, {"bucket": 4}, {"fp8": True},
                   {"min_local_rows": 2}):
        with pytest.raises(NotImplementedError):
            as_tuple(target.pack(seqs, config, 0))
    with pytest.raises(NotImplementedError):
        as_tuple(target.pack(seqs, {}, 0, pad_value=5))
    with pytest.raises(NotImplementedError):
        as_tuple(target.pack(seqs, {}, 0, need_roll=True))


def test_unpack_of_any_dtype(target: OpenRLHFTarget) -> None:
    # the glue's pad_input must not fail where torch has no index_put kernel (uint16)
    seqs = [np.array([1, 2, 3], dtype=np.uint16), np.array([4], dtype=np.uint16)]
    packed = [as_tuple(target.pack(seqs, CONTIGUOUS2, r)) for r in range(2)]
    out = target.unpack([p[0] for p in packed], packed[0][2], CONTIGUOUS2)
    assert [o.tolist() for o in out] == [[1, 2, 3], [4]]
    assert all(o.dtype == np.uint16 for o in out)

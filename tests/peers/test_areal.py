"""The areal target: AReaL's Megatron packing path, from the installed areal wheel.

Expected values are hand-computed from the behaviour AReaL's docstrings and engine comments
state: sequences padded to `tp * cp * 2` (cp > 1), the pack padded to a multiple of
`lcm(that, 256)` by a padding segment of its own, TE's zigzag chunks on each rank.
"""

from __future__ import annotations

import importlib.metadata
import math
from pathlib import Path

import numpy as np
import pytest

_DIST: importlib.metadata.Distribution | None
try:
    _DIST = importlib.metadata.distribution("areal")
except importlib.metadata.PackageNotFoundError:
    _DIST = None
pytestmark = pytest.mark.skipif(
    _DIST is None, reason="areal is not installed (`nox -s conformance -- --target areal` "
    "installs areal==1.0.4 --no-deps)")


@pytest.fixture(scope="module")
def target():  # type: ignore[no-untyped-def]
    from thd_packing.peers.areal import ArealTarget
    return ArealTarget()


def test_the_code_comes_from_the_wheel(target) -> None:  # type: ignore[no-untyped-def]
    assert _DIST is not None
    data = Path(str(_DIST.locate_file("areal/utils/data.py")))
    cp = Path(str(_DIST.locate_file("areal/engine/megatron_utils/packed_context_parallel.py")))
    assert target.fns["pad_packed_tensor_dict"].__code__.co_filename == str(data)
    assert target.fns["pad_mb_list"].__code__.co_filename == str(data)
    assert Path(target.cp_mod.__file__) == cp
    assert target.page == 256


def test_one_batch_on_two_zigzag_ranks(target) -> None:  # type: ignore[no-untyped-def]
    seqs = [np.array([1, 2, 3, 4, 5]), np.array([10, 11, 12])]
    config = {"tp_size": 1, "cp_size": 2, "cp_layout": "zigzag"}
    packs = [target.pack(seqs, config, r) for r in range(2)]
    # 5 -> 8 and 3 -> 4 rows (multiples of 2 * cp); 12 -> 256 by a padding segment of 244
    assert packs[0].meta["cu_seqlens_padded"].tolist() == [0, 8, 12, 256]
    assert packs[0].meta["local_rows"] == 128 and packs[0].meta["total"] == 256
    # chunks of 2 rows for sequence 0: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2
    assert packs[0].rows[:6].tolist() == [1, 2, 0, 0, 10, 0]
    assert packs[1].rows[:6].tolist() == [3, 4, 5, 0, 11, 12]
    assert not packs[0].rows[6:].any() and not packs[1].rows[6:].any()
    assert packs[0].position_ids is None  # the engine hands the model unsharded position ids


def test_position_ids_without_cp(target) -> None:  # type: ignore[no-untyped-def]
    packed = target.pack([np.array([7, 8, 9]), np.zeros(0, dtype=np.int64)], {}, 0)
    assert packed.meta["cu_seqlens_padded"].tolist() == [0, 3, 3, 256]
    assert packed.position_ids is not None
    assert packed.position_ids[:5].tolist() == [0, 1, 2, 0, 1]  # the padding segment restarts
    assert packed.rows[:4].tolist() == [7, 8, 9, 0]


def test_the_adapter_refuses_what_areal_does_not_do(target) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(NotImplementedError, match="page"):
        target.pack([np.array([1])], {"bucket": 512}, 0)
    with pytest.raises(NotImplementedError, match="zigzag"):
        target.pack([np.array([1])], {"cp_size": 2, "cp_layout": "contiguous"}, 0)


@pytest.mark.parametrize(("tp", "cp", "lengths"), [(3, 1, [5, 700]), (2, 3, [1, 1, 1]),
                                                   (1, 4, [0, 250, 7])])
def test_the_total_is_the_page_multiple(target, tp, cp, lengths) -> None:  # type: ignore[no-untyped-def]
    """T = ceil_to(sum of ceil_to(L, a), lcm(a, 256)) with a = tp * cp * 2 (cp > 1) or tp."""
    a = tp * cp * 2 if cp > 1 else tp
    s = sum(-(-n // a) * a for n in lengths)
    m = math.lcm(a, 256)
    seqs = [np.arange(1, n + 1) for n in lengths]
    meta = target.pack(seqs, {"tp_size": tp, "cp_size": cp}, 0).meta
    assert meta["total"] == -(-s // m) * m
    assert meta["local_rows"] * cp == meta["total"]


def test_fp8_aligns_each_sequence_to_lcm_with_16(target) -> None:  # type: ignore[no-untyped-def]
    """The engine's FP8 alignment, lcm(tp * cp * 2, 16): at tp 1, cp 2 a sequence of 5 takes
    16 rows (4 without FP8)."""
    fp8 = target.pack([np.arange(1, 6), np.array([9])], {"cp_size": 2, "fp8": True}, 0).meta
    plain = target.pack([np.arange(1, 6), np.array([9])], {"cp_size": 2}, 0).meta
    assert fp8["cu_seqlens_padded"].tolist()[:3] == [0, 16, 32]
    assert plain["cu_seqlens_padded"].tolist()[:3] == [0, 8, 12]


def test_fp8_at_tp_8_cp_4_leaves_8_rows_per_tp_slice(target) -> None:  # type: ignore[no-untyped-def]
    """The bug on docs/findings/areal.md: the page of 256 rows over tp * cp = 32 ranks gives
    each TP slice 8 rows, and an FP8 GEMM needs a multiple of 16."""
    meta = target.pack([np.array([5])], {"tp_size": 8, "cp_size": 4, "fp8": True}, 0).meta
    assert meta["total"] == 256
    assert meta["local_rows"] // 8 == 8

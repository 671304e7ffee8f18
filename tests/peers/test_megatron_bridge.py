"""The megatron-bridge target: Bridge's in-batch THD packing, from the installed wheel.

Expected values are hand-computed from `pack_batch_sequences`' docstring and comments
(sequences padded to `pad_to_multiple_of`, lengths read from the tokens) and TE's documented
zigzag partition.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np
import pytest

_DIST: importlib.metadata.Distribution | None
try:
    _DIST = importlib.metadata.distribution("megatron-bridge")
except importlib.metadata.PackageNotFoundError:
    _DIST = None
pytestmark = pytest.mark.skipif(
    _DIST is None, reason="megatron-bridge is not installed (`nox -s conformance -- --target "
    "megatron-bridge` installs megatron-bridge==0.3.1 --no-deps)")


@pytest.fixture(scope="module")
def target():  # type: ignore[no-untyped-def]
    from thd_packing.peers.megatron_bridge import MegatronBridgeTarget
    return MegatronBridgeTarget()


def test_the_code_comes_from_the_wheel(target) -> None:  # type: ignore[no-untyped-def]
    assert _DIST is not None
    vlm = Path(str(_DIST.locate_file("megatron/bridge/training/vlm_step.py")))
    assert target.pack_batch_sequences.__code__.co_filename == str(vlm)


def test_one_batch_on_two_zigzag_ranks(target) -> None:  # type: ignore[no-untyped-def]
    seqs = [np.array([1, 2, 3, 4, 5]), np.array([10, 11, 12])]
    packs = [target.pack(seqs, {"cp_size": 2, "cp_layout": "zigzag"}, r) for r in range(2)]
    assert packs[0].meta["cu_seqlens_padded"].tolist() == [0, 8, 12]  # multiples of 2 * cp
    assert packs[0].rows.tolist() == [1, 2, 0, 0, 10, 0]
    assert packs[1].rows.tolist() == [3, 4, 5, 0, 11, 12]
    assert packs[1].labels is not None and packs[1].loss_mask is not None
    assert packs[1].labels.tolist() == [4, 5, -100, -100, 12, -100]
    assert packs[1].loss_mask.tolist() == [True, True, False, False, True, False]


def test_a_sequence_ending_in_the_pad_id_loses_tokens(target) -> None:  # type: ignore[no-untyped-def]
    """Bridge reads a sequence's length from its tokens: real trailing 0s are cut (the bug
    on docs/findings/megatron-bridge.md)."""
    packed = target.pack([np.array([5, 0, 0]), np.array([7])], {}, 0)
    assert packed.meta["cu_seqlens_padded"].tolist() == [0, 1, 2]
    assert packed.rows.tolist() == [5, 7]

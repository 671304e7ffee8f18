"""The ms-swift target: ms-swift's padding-free Megatron collator, from the installed wheels.

Expected values are hand-computed from ms-swift's code comments and `get_padding_to`'s
documented factors: sequences padded to a multiple of `2 * cp`, the pack to a multiple of
`tp * cp` (tp with sequence parallelism), TE's zigzag chunks on each rank.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np
import pytest


def _installed(name: str) -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None


_DIST = _installed("ms-swift")
pytestmark = pytest.mark.skipif(
    _DIST is None or _installed("mcore-bridge") is None,
    reason="ms-swift or mcore-bridge is not installed (`nox -s conformance -- --target "
    "ms-swift` installs ms-swift==4.6.0 and mcore-bridge==1.6.5 --no-deps)")


@pytest.fixture(scope="module")
def target():  # type: ignore[no-untyped-def]
    from thd_packing.peers.ms_swift import MsSwiftTarget
    return MsSwiftTarget()


def test_the_code_comes_from_the_wheel(target) -> None:  # type: ignore[no-untyped-def]
    assert _DIST is not None
    base = Path(str(_DIST.locate_file("swift/template/base.py")))
    assert target.template_class._data_collator.__code__.co_filename == str(base)
    assert target.get_padding_to(type("A", (), {
        "tensor_model_parallel_size": 2, "sequence_parallel": True, "context_parallel_size": 4,
        "fp8_recipe": "mxfp8", "attention_backend": "flash"})()) == 2 * 4 * 32


def test_one_batch_on_two_zigzag_ranks(target) -> None:  # type: ignore[no-untyped-def]
    seqs = [np.array([1.5, 2, 3, 4, 5]), np.array([10.5, 11, 12])]
    packs = [target.pack(seqs, {"cp_size": 2, "cp_layout": "zigzag"}, r) for r in range(2)]
    assert packs[0].meta["cu_seqlens_padded"].tolist() == [0, 8, 12]  # multiples of 2 * cp
    assert packs[0].rows.tolist() == [1.5, 2, 0, 0, 10.5, 0]
    assert packs[1].rows.tolist() == [3, 4, 5, 0, 11, 12]
    assert packs[0].rows.dtype == np.float64
    assert packs[1].position_ids is not None
    assert packs[1].position_ids.tolist() == [2, 3, 4, 5, 1, 2]


def test_padding_rows_are_one_row_segments_without_cp(target) -> None:  # type: ignore[no-untyped-def]
    packed = target.pack([np.array([7, 8, 9])], {"tp_size": 2}, 0)
    assert packed.meta["cu_seqlens_padded"].tolist() == [0, 3, 4]  # tp 2: one padding row
    assert packed.position_ids is not None and packed.position_ids.tolist() == [0, 1, 2, 0]


def test_odd_tp_with_cp_leaves_rows_without_position_ids(target) -> None:  # type: ignore[no-untyped-def]
    """The bug on docs/findings/ms-swift.md: tp 3 with sequence parallelism and cp 2 pads the
    ids to 6 rows but the position ids (and so cu_seqlens) cover only 4."""
    res = target.collate([4], 3, 2)
    assert res["input_ids"].shape[1] == 6
    assert res["position_ids"].shape[1] == 4


def test_fp8_recipes_set_the_factor_get_padding_to_reads(target) -> None:  # type: ignore[no-untyped-def]
    """tp 2 with sequence parallelism: the pack to 2 x the recipe's factor (16, 32, 128; FP4
    16, the candidate bug on docs/findings/ms-swift.md)."""
    totals = {fp8: target.pack([np.array([1, 2, 3])], {"tp_size": 2, "fp8": fp8}, 0)
              .meta["total"] for fp8 in ("tensor", "mxfp8", "block", "nvfp4")}
    assert totals == {"tensor": 32, "mxfp8": 64, "block": 256, "nvfp4": 32}


def test_labels_are_rolled_with_ignore_at_each_last_token(target) -> None:  # type: ignore[no-untyped-def]
    """The encoder's labels (the ids, the first -100) rolled by -1 over the packed row: each
    token's label is its next token, each last token reads the next sequence's -100."""
    seqs = [np.array([10, 11, 12]), np.array([20, 21])]
    packed = target.pack(seqs, {"ignore_index": -7}, 0)
    assert packed.labels is not None and packed.loss_mask is not None
    assert packed.labels.tolist() == [11, 12, -7, 21, -7]
    assert packed.loss_mask.tolist() == [True, True, False, True, False]
    rolled = target.pack(seqs, {"ignore_index": -7}, 0, need_roll=True)
    assert rolled.rows.tolist() == packed.labels.tolist()

"""The torchtune target: torchtune's PackedDataset, executed from the installed torchtune wheel.

Expected values are hand-computed from PackedDataset's docstring: samples concatenated in order,
`input_pos` the offset within each sample, the pack padded to `max_seq_len` with the padding as
one more `seq_lens` entry and its `input_pos` continuing from the last sample's.
"""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

_DIST: importlib.metadata.Distribution | None
try:
    _DIST = importlib.metadata.distribution("torchtune")
except importlib.metadata.PackageNotFoundError:
    _DIST = None
pytestmark = pytest.mark.skipif(
    _DIST is None, reason="torchtune is not installed (`nox -s conformance -- --target "
    "torchtune` installs torchtune==0.6.1 --no-deps)")


@pytest.fixture(scope="module")
def target():  # type: ignore[no-untyped-def]
    from thd_packing.peers.torchtune import TARGET

    return TARGET()


def test_the_code_comes_from_the_wheel(target) -> None:  # type: ignore[no-untyped-def]
    assert _DIST is not None
    path = str(_DIST.locate_file("torchtune/datasets/_packed.py"))
    assert target.module.PackedDataset._pad_pack.__code__.co_filename == path


def test_one_batch_packs_as_documented(target) -> None:  # type: ignore[no-untyped-def]
    seqs = [np.array([5, 6, 7]), np.zeros(0, dtype=np.int64), np.array([8, 9])]
    packed = target.pack(seqs, {"fixed_total": 8}, 0, pad_value=-1)
    assert packed.rows.tolist() == [5, 6, 7, 8, 9, -1, -1, -1]
    assert packed.position_ids.tolist() == [0, 1, 2, 0, 1, 2, 3, 4]  # the padding continues
    assert packed.meta["cu_seqlens_padded"].tolist() == [0, 3, 3, 5, 8]  # the empty one kept
    # the recipe's shift reads the next sample's first token at a sample's last row
    assert packed.labels.tolist() == [6, 7, 8, 9, -100, -100, -100, -100]


def test_a_batch_past_max_seq_len_is_not_one_pack(target) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="fixed_total"):
        target.pack([np.array([1, 2, 3]), np.array([4, 5])], {"fixed_total": 4}, 0)
    with pytest.raises(ValueError, match="too long"):  # torchtune's own check
        target.pack([np.array([1, 2, 3, 4, 5])], {"fixed_total": 4}, 0)

"""The veomni target: VeOmni's PackingCollator, executed from the installed veomni wheel.

Expected values are hand-computed from data_collator.py: the examples concatenated into one row,
every key padded to `pad_to_length` with its pad value (input ids 0, labels -100, position ids
0), -100 at the first label of every example but the first, and the tail padding coalesced into
one segment of `cu_seq_lens_q`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

import numpy as np
import pytest

_DIST: importlib.metadata.Distribution | None
try:
    _DIST = importlib.metadata.distribution("veomni")
except importlib.metadata.PackageNotFoundError:
    _DIST = None
pytestmark = pytest.mark.skipif(
    _DIST is None or importlib.util.find_spec("transformers") is None,
    reason="veomni or transformers is not installed (`nox -s conformance -- --target veomni` "
    "installs veomni==0.1.12 --no-deps; transformers is a test dependency)")


@pytest.fixture(scope="module")
def target():  # type: ignore[no-untyped-def]
    from thd_packing.peers.veomni import TARGET

    return TARGET()


def test_the_code_comes_from_the_wheel(target) -> None:  # type: ignore[no-untyped-def]
    assert _DIST is not None
    path = str(_DIST.locate_file("veomni/data/data_collator.py"))
    assert target.module.PackingCollator.__call__.__code__.co_filename == path


def test_one_batch_packs_as_documented(target) -> None:  # type: ignore[no-untyped-def]
    packed = target.pack([np.array([5, 6, 7]), np.array([8, 9])], {"fixed_total": 8}, 0,
                         pad_value=-1)
    assert packed.rows.tolist() == [5, 6, 7, 8, 9, -1, -1, -1]
    assert packed.position_ids.tolist() == [0, 1, 2, 0, 1, 0, 0, 0]
    assert packed.meta["cu_seqlens_padded"].tolist() == [0, 3, 5, 8]  # padding: one segment
    assert packed.meta["max_seqlen"] == 3
    assert packed.labels.tolist() == [6, 7, -100, 9, -100, -100, -100, -100]


def test_an_empty_example_after_the_first_crashes(target) -> None:  # type: ignore[no-untyped-def]
    # VeOmni 0.1.12 writes labels[i][0] for every example i >= 1 (data_collator.py line 290),
    # out of range for an empty one. Pinned so that a fixed release shows (docs/findings).
    with pytest.raises(IndexError):
        target.pack([np.array([1, 2]), np.zeros(0, dtype=np.int64)], {}, 0)


def test_sequence_parallelism_pads_and_slices_contiguously(target) -> None:  # type: ignore[no-untyped-def]
    """SequenceParallelCollator: the packed row padded to a multiple of the SP size, sliced
    contiguously; cu_seq_lens over the whole row, the SP padding its own last segment; the
    labels shifted by the collator."""
    seqs = [np.array([1, 2, 3]), np.array([4, 5, 6, 7])]
    config = {"cp_size": 2, "cp_layout": "contiguous"}
    packs = [target.pack(seqs, config, r) for r in range(2)]
    assert [p.rows.tolist() for p in packs] == [[1, 2, 3, 4], [5, 6, 7, 0]]
    assert [p.position_ids.tolist() for p in packs] == [[0, 1, 2, 0], [1, 2, 3, 0]]
    assert packs[1].meta["cu_seqlens_padded"].tolist() == [0, 3, 7, 8]
    assert [p.labels.tolist() for p in packs] == [[2, 3, -100, 5], [6, 7, -100, -100]]

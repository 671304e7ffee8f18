"""The torchtitan target: torchtitan's document stream and varlen metadata, from its wheel.

Expected values are hand-computed from text_datasets.py's comments (inputs and labels shifted
within each document, positions per document, windows of exactly seq_len rows, a window's
first partial document renumbered from 0) and from create_varlen_metadata_for_document's
docstring (a document starts where the position is 0).
"""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

_DIST: importlib.metadata.Distribution | None
try:
    _DIST = importlib.metadata.distribution("torchtitan")
except importlib.metadata.PackageNotFoundError:
    _DIST = None
pytestmark = pytest.mark.skipif(
    _DIST is None, reason="torchtitan is not installed (`nox -s conformance -- --target "
    "torchtitan` installs torchtitan==0.3.0 --no-deps)")


@pytest.fixture(scope="module")
def target():  # type: ignore[no-untyped-def]
    from thd_packing.peers.torchtitan import TARGET

    return TARGET()


def test_the_code_comes_from_the_wheel(target) -> None:  # type: ignore[no-untyped-def]
    assert _DIST is not None
    text = str(_DIST.locate_file("torchtitan/hf_datasets/text_datasets.py"))
    attention = str(_DIST.locate_file("torchtitan/models/common/attention.py"))
    assert target.stream_class.__iter__.__code__.co_filename == text
    assert target.varlen_metadata.__code__.co_filename == attention


def test_one_batch_packs_as_documented(target) -> None:  # type: ignore[no-untyped-def]
    packed = target.pack([np.array([5, 6, 7]), np.array([8, 9]), np.array([4])], {}, 0)
    assert packed.rows.tolist() == [5, 6, 7, 8, 9, 4]
    assert packed.position_ids.tolist() == [0, 1, 2, 0, 1, 0]
    assert packed.meta["cu_seqlens_padded"].tolist() == [0, 3, 5, 6]
    assert packed.meta["max_seqlen"] == 3


def test_windows_cut_documents_and_drop_the_rest(target) -> None:  # type: ignore[no-untyped-def]
    windows = target.windows([[1, 2, 3, 4, 5], [6, 7], [8, 9, 10]], 4)
    assert [w[0]["input"].tolist() for w in windows] == [[1, 2, 3, 4], [5, 6, 7, 8]]
    # document 0's tail renumbered from 0, then document 1, then document 2's start
    assert windows[1][0]["positions"].tolist() == [0, 0, 1, 0]
    assert windows[1][1].tolist() == [0, 7, 0, 9]  # targets: EOS (0) ends each document
    # [9, 10] never fill a window: a finite stream ends without them


def test_no_token_no_window_an_empty_pack(target) -> None:  # type: ignore[no-untyped-def]
    """A batch of only empty documents: the stream makes no window (torchtitan's own code), and
    the adapter says so as a pack of no rows and no segment."""
    assert target.windows([[], []], 1) == []
    packed = target.pack([np.zeros(0, np.int64), np.zeros(0, np.int64)], {}, 0)
    assert packed.rows.shape == (0,) and packed.position_ids.shape == (0,)
    assert packed.meta["cu_seqlens_padded"].tolist() == [0]

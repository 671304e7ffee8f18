"""The trl target: TRL's padding-free collator, compiled from the installed trl wheel.

Expected values are hand-computed from the collator's docstring (sft_trainer.py: one flattened
row, position ids restarting at 0, -100 at each sequence's first label) and from `pad`'s
`pad_to_multiple_of`: the row is padded with the pad token to a multiple of 8, the padding's
position ids are 0, so each padding row starts a segment of its own.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

import numpy as np
import pytest

from thd_packing.conformance.protocol import collecting_refusals

_DIST: importlib.metadata.Distribution | None
try:
    _DIST = importlib.metadata.distribution("trl")
except importlib.metadata.PackageNotFoundError:
    _DIST = None
pytestmark = pytest.mark.skipif(
    _DIST is None or importlib.util.find_spec("transformers") is None,
    reason="trl or transformers is not installed (`nox -s conformance -- --target trl` "
    "installs trl==1.16.0 --no-deps; transformers is a test dependency)")


@pytest.fixture(scope="module")
def target():  # type: ignore[no-untyped-def]
    from thd_packing.peers.trl import TARGET

    return TARGET()


def test_the_code_comes_from_the_wheel(target) -> None:  # type: ignore[no-untyped-def]
    assert _DIST is not None
    path = str(_DIST.locate_file("trl/trainer/sft_trainer.py"))
    assert target.collator_class.torch_call.__code__.co_filename == path


def test_one_batch_packs_as_documented(target) -> None:  # type: ignore[no-untyped-def]
    seqs = [np.array([5, 6, 7]), np.array([8, 9])]
    packed = target.pack(seqs, {"bucket": 8}, 0, pad_value=-1)
    assert packed.rows.tolist() == [5, 6, 7, 8, 9, -1, -1, -1]
    assert packed.position_ids.tolist() == [0, 1, 2, 0, 1, 0, 0, 0]
    # one segment per sequence, then one per padding row
    assert packed.meta["cu_seqlens_padded"].tolist() == [0, 3, 5, 6, 7, 8]
    assert packed.meta["max_seqlen"] == 3
    assert packed.labels.tolist() == [6, 7, -100, 9, -100, -100, -100, -100]


def test_without_a_bucket_nothing_is_padded(target) -> None:  # type: ignore[no-untyped-def]
    # TRL 1.16: an empty example's ids, torch.tensor([]), are float32, and the collator's cat
    # promotes the whole batch's input_ids and labels to float32 (R-CONSUMER-16).
    with collecting_refusals() as refused:
        packed = target.pack([np.array([1, 2]), np.zeros(0, dtype=np.int64), np.array([3])],
                             {}, 0)
    assert {message.split(" are ")[1][:7] for message, _ in refused} == {"float32"}, refused
    assert packed.rows.tolist() == [1, 2, 3]
    assert packed.meta["cu_seqlens_padded"].tolist() == [0, 2, 3]  # the empty one leaves none


def test_an_all_empty_batch_crashes(target) -> None:  # type: ignore[no-untyped-def]
    # TRL 1.16: max() of the empty segment lengths (sft_trainer.py line 214). Pinned so that a
    # fixed release shows here (docs/findings/trl.md).
    with pytest.raises(RuntimeError, match="numel"):
        target.pack([np.zeros(0, dtype=np.int64)], {"bucket": 4}, 0)


def test_the_pre_packed_form_gives_the_same_pack() -> None:
    """One example with seq_lengths, as pack_dataset hands it over: the position ids come from
    get_position_ids_from_packed_seq_lengths, the pack is the list form's."""
    from thd_packing.peers.trl import PREPACKED, TARGET

    seqs = [np.array([7, 8, 9]), np.array([], dtype=np.int64), np.array([5, 6])]
    listed, prepacked = TARGET(), PREPACKED()
    assert prepacked.examples([[1, 2, 3], [], [4, 5]]) == [
        {"input_ids": [1, 2, 3, 4, 5], "seq_lengths": [3, 2]}]
    with collecting_refusals() as refused:  # the list form's empty example: float32 ids
        a = listed.pack(seqs, {"bucket": 8}, 0)
    assert refused
    b = prepacked.pack(seqs, {"bucket": 8}, 0)  # pack_dataset drops empty examples first
    assert b.rows.tolist() == a.rows.tolist() == [7, 8, 9, 5, 6, 0, 0, 0]
    assert b.position_ids is not None and b.position_ids.tolist() == [0, 1, 2, 0, 1, 0, 0, 0]
    assert b.meta["cu_seqlens_padded"].tolist() == [0, 3, 5, 6, 7, 8]

"""The transformers target: DataCollatorWithFlattening from the installed transformers wheel.

Expected values are hand-computed from the collator's docstring: one concatenated row, position
ids restarting at 0 per example, -100 at each example's first label, empty examples dropped.
"""

from __future__ import annotations

import importlib.util
import inspect

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="transformers is not installed (a test dependency: pip install -e '.[test]' "
    "installs transformers==5.24.0)")


@pytest.fixture(scope="module")
def target():  # type: ignore[no-untyped-def]
    from thd_packing.peers.transformers import TARGET

    return TARGET()


def test_the_code_comes_from_the_wheel(target) -> None:  # type: ignore[no-untyped-def]
    import transformers

    source = inspect.getsourcefile(type(target.collator))
    assert source is not None and source.startswith(str(transformers.__path__[0]))
    assert type(target.collator).__name__ == "DataCollatorWithFlattening"


def test_one_batch_packs_as_documented(target) -> None:  # type: ignore[no-untyped-def]
    seqs = [np.array([5, 6, 7]), np.zeros(0, dtype=np.int64), np.array([8, 9])]
    packed = target.pack(seqs, {}, 0)
    assert packed.rows.tolist() == [5, 6, 7, 8, 9]
    assert packed.position_ids.tolist() == [0, 1, 2, 0, 1]
    assert packed.meta["cu_seqlens_padded"].tolist() == [0, 3, 5]  # the empty one dropped
    assert packed.meta["num_seqs"] == 2 and packed.meta["max_seqlen"] == 3
    # the label the loss reads at each row: the next token of the same example, else -100
    assert packed.labels.tolist() == [6, 7, -100, 9, -100]
    assert packed.loss_mask.tolist() == [True, True, False, True, False]


def test_rows_of_any_dtype_and_shape_come_back(target) -> None:  # type: ignore[no-untyped-def]
    seqs = [np.array([[0.5, -1.0]], dtype=np.float32), np.array([[2.0, 3.0], [4.0, 5.5]],
                                                                 dtype=np.float32)]
    packed = target.pack(seqs, {}, 0, need_roll=True)
    assert packed.rows.dtype == np.float32
    assert packed.rows.tolist() == [[-100, -100], [4.0, 5.5], [-100, -100]]


def test_an_all_empty_batch_is_refused(target) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="every example is empty"):
        target.pack([np.zeros(0, dtype=np.int64)], {}, 0)

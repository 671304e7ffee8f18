"""impl's padded batch + mask form (impl/masked.py): the word-scan fast path, and its rejections
(R-IN-1, R-ERR-1, R-ERR-9). Written from the spec and the form's contract, not from masked.py's
arithmetic: each case has its expected rows built by hand with boolean indexing."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import impl


def _expected(values: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    return [values[i][mask[i]] for i in range(values.shape[0])]


@pytest.mark.rules("R-IN-7")
def test_runs_read_their_start_from_the_byte() -> None:
    """Runs whose length equals the count of 8-byte words they touch (one entry inside a word,
    two across a word boundary): the start is the run's first byte, not its first word's."""
    s = 16
    mask = torch.zeros(3, s, dtype=torch.bool)
    mask[0, 5] = mask[1, 7] = mask[1, 8] = mask[2, 13] = True
    values = torch.arange(3 * s, dtype=torch.int64).reshape(3, s) + 100
    rows, _, plan = impl.pack_thd(values, impl.PackConfig(), 0, mask=mask)
    got = [rows[int(plan.cu_seqlens_padded[i]):][:int(plan.seqlens[i])].tolist()
           for i in range(3)]
    assert got == [t.tolist() for t in _expected(values, mask)]


@pytest.mark.parametrize("positions", [
    [0, 1, 2, 3, 4, 11],  # first in word 0, last at byte 3 of word 1: span 12, count 6
    [0, 15], [2, 3, 9], [7, 8], [5], list(range(16)), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 14],
])
def test_scattered_rows_are_not_taken_for_runs(positions: list[int]) -> None:
    """A row whose True entries are not one run must be gathered entry by entry: the word scan's
    first/last positions may only serve a row whose count equals its span."""
    s = 16
    mask = torch.zeros(2, s, dtype=torch.bool)
    mask[0, positions] = True
    mask[1, 3:9] = True  # one run next to it
    values = torch.arange(2 * s, dtype=torch.int64).reshape(2, s) + 100
    rows, _, plan = impl.pack_thd(values, impl.PackConfig(), 0, mask=mask)
    want = torch.cat(_expected(values, mask))
    assert plan.seqlens.tolist() == [len(positions), 6]
    got = torch.cat([rows[int(plan.cu_seqlens_padded[i]):][:int(plan.seqlens[i])]
                     for i in range(2)])
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("values, mask, error, word", [
    ([torch.arange(4)], torch.ones(1, 4, dtype=torch.bool), TypeError, "batch"),
    ("abc", torch.ones(1, 4, dtype=torch.bool), TypeError, "batch"),
    (torch.arange(8).reshape(2, 4), [[True] * 4] * 2, TypeError, "mask"),
    (torch.arange(8).reshape(2, 4), torch.ones(2, 4, dtype=torch.int64), TypeError, "mask"),
    (torch.arange(8).reshape(2, 4), torch.ones(2, 3, dtype=torch.bool), ValueError, "mask"),
])
def test_mask_form_rejections_name_the_field(values: Any, mask: Any, error: type,
                                             word: str) -> None:
    """R-ERR-1 / R-ERR-9: typed errors whose message names what is wrong."""
    with pytest.raises(error, match=word):
        impl.pack_thd(values, impl.PackConfig(), 0, mask=mask)


@pytest.mark.parametrize("mask", [
    torch.ones(8, 1, dtype=torch.bool).T,  # [1, 8], stride (1, 1): "contiguous", odd row stride
    torch.ones(1, 16, dtype=torch.bool)[:, 3:11],  # storage offset 3
    torch.ones(2, 24, dtype=torch.bool)[:, 8:16],  # row stride 24, offset 8: words still line up
    torch.ones(2, 20, dtype=torch.bool)[:, 4:12],  # row stride 20: not in words
], ids=["transposed-column", "offset-3", "aligned-slice", "unaligned-rows"])
def test_strided_masks_pack_their_tokens(mask: torch.Tensor) -> None:
    """Any bool mask of the right shape is valid input, whatever its strides and offset: the
    word scan may read the mask as int64 words only where the bytes line up into words."""
    b, s = mask.shape
    values = torch.arange(b * s, dtype=torch.int64).reshape(b, s) + 7
    rows, _, plan = impl.pack_thd(values, impl.PackConfig(), 0, mask=mask)
    assert plan.seqlens.tolist() == [s] * b
    assert torch.equal(rows, torch.cat(_expected(values, mask)))


def test_a_mask_without_columns_packs_empty_sequences() -> None:
    """S = 0 is B empty sequences (R-IN-3 allows zero-length ones), as the list form packs them."""
    config = impl.PackConfig(tp_size=2, cp_size=2)
    rows, pos, plan = impl.pack_thd(torch.zeros(3, 0, 4), config, 1,
                                    mask=torch.zeros(3, 0, dtype=torch.bool))
    rows_l, pos_l, plan_l = impl.pack_thd([torch.zeros(0, 4)] * 3, config, 1)
    assert plan.seqlens.tolist() == [0, 0, 0]
    assert torch.equal(plan.cu_seqlens_padded, plan_l.cu_seqlens_padded)
    assert torch.equal(rows, rows_l) and torch.equal(pos, pos_l)

"""Per-shard binning (bench/shards.py): the rows a batched map gets back hold every example of
the dataset once, by its dataset-wide index, and the loss figure is counted against one run."""

from __future__ import annotations

from bench import shards
from impl import bins as ib

LENGTHS = [900, 40, 3000, 7, 512, 2048, 33, 1000, 64, 1500, 700, 5, 4000, 12]


def test_bin_batch_rows_hold_every_example_once() -> None:
    config = ib.BinConfig(4096)
    rows = []
    for start in range(0, len(LENGTHS), 5):  # shards of 5, as Dataset.map(batch_size=5) cuts
        rows += shards.bin_batch({"length": LENGTHS[start:start + 5]},
                                 list(range(start, min(start + 5, len(LENGTHS)))),
                                 config)["examples"]
    assert sorted(i for row in rows for i in row) == list(range(len(LENGTHS)))
    assert all(sum(LENGTHS[i] for i in row) <= 4096 for row in rows)
    assert all(set(row) <= set(range(s, s + 5)) for row in rows
               for s in [5 * (row[0] // 5)])  # a bin never mixes shards
    assert len(rows) == shards.shard_bins(LENGTHS, 5, config)


def test_shard_loss_against_one_run() -> None:
    config = ib.BinConfig(4096)
    whole = len(ib.bin_lengths(LENGTHS, config).bins)
    table = shards.shard_loss(LENGTHS, [len(LENGTHS), 2], config)
    assert table[0] == (None, whole, 0.0)
    assert table[1] == (len(LENGTHS), whole, 0.0)  # one shard is the whole dataset
    shard, used, pct = table[2]
    assert shard == 2 and used == shards.shard_bins(LENGTHS, 2, config) > whole
    assert pct == 100.0 * (used - whole) / whole

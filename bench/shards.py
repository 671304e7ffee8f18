"""Binning a dataset larger than memory: per shard, through HF `datasets`' batched map.

    python -m bench.shards --dist lognormal --examples 1000000 --capacity 16384 \
        --shards 1000,10000,100000

`bin_batch` is the function to hand to `Dataset.map(bin_batch, batched=True, batch_size=S,
with_indices=True, remove_columns=..., fn_kwargs={"config": config})`: it takes one shard's
`length` column (Arrow in) and returns one row per bin (bins out), with the dataset-wide indices
of its examples. Each shard is binned alone, so a bin never mixes shards; what that costs is
the bins used over binning everything at once, which `shard_loss` measures (and the CLI prints)
for each shard size.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from typing import Any

from impl import bins as ib

from .lengths import SYNTHETIC, synthetic_stream


def bin_batch(batch: dict[str, list[Any]], indices: list[int], config: ib.BinConfig
              ) -> dict[str, list[Any]]:
    """One shard's examples to its bins: columns `examples` (dataset-wide indices), `starts`
    and `lengths` (each piece's), one row per bin. Dropped examples appear in no row."""
    out = ib.bin_lengths(batch["length"], config)
    return {"examples": [[indices[p.example] for p in b] for b in out.bins],
            "starts": [[p.start for p in b] for b in out.bins],
            "lengths": [[p.length for p in b] for b in out.bins]}


def shard_bins(lengths: Sequence[int], shard: int, config: ib.BinConfig) -> int:
    """The bins used binning each run of `shard` examples alone (what the batched map does)."""
    used = 0
    for start in range(0, len(lengths), shard):
        used += len(bin_batch({"length": list(lengths[start:start + shard])},
                              list(range(start, min(start + shard, len(lengths)))),
                              config)["examples"])
    return used


def shard_loss(lengths: Sequence[int], shards: Sequence[int], config: ib.BinConfig
               ) -> list[tuple[int | None, int, float]]:
    """(shard size or None for all at once, bins used, % more bins than all at once)."""
    whole = len(ib.bin_lengths(list(lengths), config).bins)
    rows: list[tuple[int | None, int, float]] = [(None, whole, 0.0)]
    for shard in shards:
        used = shard_bins(lengths, shard, config)
        rows.append((shard, used, 100.0 * (used - whole) / whole))
    return rows


def through_datasets(lengths: Sequence[int], shard: int, config: ib.BinConfig) -> int:
    """The same binning through `datasets.Dataset.map` (needs `datasets`); the bins it made."""
    import datasets

    table = datasets.Dataset.from_dict({"length": list(lengths)})
    binned = table.map(bin_batch, batched=True, batch_size=shard, with_indices=True,
                       remove_columns=["length"], fn_kwargs={"config": config})
    return len(binned)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.shards", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dist", choices=SYNTHETIC, default="lognormal")
    p.add_argument("--examples", type=int, default=1_000_000)
    p.add_argument("--capacity", type=int, default=16384)
    p.add_argument("--max-len", type=int, default=4096)
    p.add_argument("--shards", default="1000,10000,100000")
    p.add_argument("--algorithm", choices=ib.ALGORITHMS, default="first_fit_decreasing")
    p.add_argument("--datasets", action="store_true",
                   help="also bin through datasets.Dataset.map and check the bin count agrees")
    args = p.parse_args(argv)
    try:
        shards = [int(x) for x in args.shards.split(",")]
        config = ib.BinConfig(args.capacity, algorithm=args.algorithm,
                              overflow="split" if args.algorithm == "wrapped" else "reject")
        lengths = list(itertools.islice(synthetic_stream(args.dist, max_len=args.max_len),
                                        args.examples))
        rows = shard_loss(lengths, shards, config)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.examples} examples ({args.dist}, max {args.max_len}), capacity "
          f"{args.capacity} tokens, {args.algorithm}")
    print(f"{'shard':>9} {'bins':>9} {'more bins %':>12}")
    for shard, used, pct in rows:
        print(f"{'all' if shard is None else shard:>9} {used:>9} {pct:>12.3f}")
    if args.datasets:
        for shard in shards:
            made = through_datasets(lengths, shard, config)
            expected = next(used for s, used, _ in rows if s == shard)
            print(f"datasets.map, batch_size={shard}: {made} bins "
                  f"({'agrees' if made == expected else f'DIFFERS from {expected}'})")
            if made != expected:
                return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 2.0.0
"""Check a vendored copy: pack and unpack the spec's zigzag example (spec §13.2) and bin the
bin step's rows example (spec/bins.md B8.2).

Ships with the package so that it travels with every copy. Run it under the copy's new name:

    python -m my_trainer._thd.check_vendored     # prints "ok: ..." or exits non-zero
    python -m pytest my_trainer/_thd/check_vendored.py

The import is relative, so what it checks is the copy it sits in, whatever that is called.
The expected values are the spec's, written out here, not computed by the code under test.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from . import SPEC_VERSION, BinConfig, PackConfig, bin_lengths, pack_thd, plan_thd, unpack_thd

# Spec §13.2: cp_size = 2, zigzag; sequences of 3 and 5 tokens pad to 4 and 8 (A = 4). Rank 0
# holds chunks 0 and 3 of each sequence, rank 1 chunks 1 and 2; padding rows are 0.
SEQS = ([1000, 1001, 1002], [2000, 2001, 2002, 2003, 2004])
CU_SEQLENS_PADDED = [0, 4, 12]
ROWS = ([1000, 0, 2000, 2001, 0, 0], [1001, 1002, 2002, 2003, 2004, 0])
POSITION_IDS = ([0, None, 0, 1, None, None], [1, 2, 2, 3, 4, None])  # None: a padding row


def _expect(what: str, got: Any, want: Any) -> None:
    """An AssertionError naming what differs (kept under `python -O`, unlike `assert`)."""
    if got != want:
        raise AssertionError(f"{what}: got {got}, the spec says {want}")


def test_zigzag_example_packs_and_unpacks() -> None:
    """Every rank's rows and position ids, the plan, and the round trip back to the batch."""
    config = PackConfig(cp_size=2)
    batch = [torch.tensor(seq, dtype=torch.int64) for seq in SEQS]
    shards = []
    for rank in range(config.cp_size):
        rows, positions, plan = pack_thd(batch, config, rank)
        _expect(f"rank {rank} rows", rows.tolist(), ROWS[rank])
        pairs = zip(positions.tolist(), POSITION_IDS[rank], strict=True)
        real = [(got, want) for got, want in pairs if want is not None]
        _expect(f"rank {rank} position ids of real rows", [g for g, _ in real],
                [w for _, w in real])
        shards.append(rows)
    plan = plan_thd([len(seq) for seq in SEQS], config)
    _expect("cu_seqlens_padded", plan.cu_seqlens_padded.tolist(), CU_SEQLENS_PADDED)
    back = unpack_thd(shards, plan, config)
    _expect("unpacked batch", [t.tolist() for t in back], [list(seq) for seq in SEQS])


# spec/bins.md B8.2: lengths 4, 7, 2, 5, 3, 2 under tp = cp = 2 (A = 8) in bins of 16 rows,
# first fit decreasing: two sequences per bin, in input order.
BIN_LENGTHS = [4, 7, 2, 5, 3, 2]
BINS = [[0, 1], [2, 3], [4, 5]]


def test_bins_example() -> None:
    """The bin step's rows example: every bin's plan within 16 rows."""
    pack = PackConfig(tp_size=2, cp_size=2)
    bins = bin_lengths(BIN_LENGTHS, BinConfig(16, cost="rows", pack=pack))
    _expect("bins", bins.indices(), BINS)
    _expect("fates", bins.fates, ["whole"] * len(BIN_LENGTHS))


def main() -> int:
    test_zigzag_example_packs_and_unpacks()
    test_bins_example()
    print(f"ok: {__package__} packs and unpacks the zigzag example of spec {SPEC_VERSION} "
          "and bins its rows example")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where impl's fixed cost goes: `pack_thd`'s stages timed one by one.

    python -m bench.stages [--batch 256] [--rows 1] [--calls 2000]

The fixed case of `bench.run --busy` by default: B sequences of one row each (nested token
ids, tp 2, cp 4, bucket 512, rank 0), so what every stage costs is its host work, torch ops on
O(B) tables, not rows; `--rows` gives the sequences more. Each stage is timed on its own, in a
loop, on the outputs of the stages before it, in the order `pack_batch` runs them (nested input,
default conventions, the shared row-map buffer). The stages' dispatched ops add up to the whole
call's (tests/bench/test_stages.py), so none of the call's ops is left out. Called in a row the
stages take about as long as the whole call; each looped on its own runs faster than it does
inside the call (measured: 0.25 ms for the seven against 0.35 ms in a row), so read a stage's
time as a share, not as what removing it would save. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import torch

import impl
from impl import pack as P
from impl.plan import plan_with_host
from impl.rowmap import chunk_table, positions_and_sources

from .probes import count_ops
from .timing import summary, time_calls


def fixed_batch(batch: int, rows: int) -> torch.Tensor:
    """B sequences of `rows` token ids each, as a jagged nested tensor."""
    return torch.nested.nested_tensor([torch.arange(rows) for _ in range(batch)],
                                      layout=torch.jagged)


def stages(nested: torch.Tensor, config: impl.PackConfig) -> dict[str, Callable[[], Any]]:
    """`pack_thd(nested, config, 0)` as its stages, each a call on the earlier stages' outputs.

    Covers the path a nested batch of real rows takes with the default conventions: rank 0
    holds real rows, the padding runs fit inside the source, no autograd (`pack_batch`).
    """
    b = P.check_batch(nested)
    src_start, values = b.src_start, b.values
    if src_start is None or values is None:
        raise TypeError("stages takes a jagged nested tensor (its values and offsets)")
    plan, padded, cu = plan_with_host(b.lengths, config)
    rows = plan.local_rows
    if padded.numel() != b.lengths.numel():
        raise ValueError("stages covers configs with one segment per sequence (no max_num_seqs, "
                         "tail='last')")
    ch = chunk_table(b.lengths, padded, cu, src_start, config.cp_size, config.cp_layout, 0,
                     rows, 0)
    real_through = torch.cumsum(ch.real, 0)
    n_real = int(real_through[-1])
    pos, spare = positions_and_sources(ch, values.shape[0], rows, b.device)
    if n_real == 0 or spare is None:
        raise ValueError("stages covers the shared row-map buffer path: real rows on rank 0, "
                         "padding runs inside the source")
    gathered = values.index_select(0, spare[:rows])

    def checks() -> None:
        P.check_call_args(config, 0, False, 0)
        P.check_pad_value(0, P.check_batch(nested).dtype)

    def real_counts() -> int:
        return int(torch.cumsum(ch.real, 0)[-1])

    def padding() -> None:
        where = P.padding_rows(ch, real_through, rows - n_real, b.device, spare.clone())
        gathered.index_fill_(0, where, 0)

    return {
        "checks (call arguments, batch, pad value)": checks,
        "plan (plan_with_host)": lambda: plan_with_host(b.lengths, config),
        "chunk table": lambda: chunk_table(b.lengths, padded, cu, src_start, config.cp_size,
                                           config.cp_layout, 0, rows, 0),
        "real rows per chunk (cumsum, one host read)": real_counts,
        "row map: position ids and index (positions_and_sources)":
            lambda: positions_and_sources(ch, values.shape[0], rows, b.device),
        "gather (index_select)": lambda: values.index_select(0, spare[:rows]),
        "padding rows' index and fill": padding,
    }


def _median_us(fn: Callable[[], Any], calls: int) -> float:
    return float(summary(time_calls(fn, calls, warmup=min(calls, 50)))["median_s"]) * 1e6


def ops(fn: Callable[[], Any]) -> int:
    """Dispatched aten ops of one call, without the `clone` a stage makes to stay repeatable."""
    counts = count_ops(fn)
    return sum(v for k, v in counts.items() if k != "aten.clone")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stages", description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=256, help="sequences (default 256)")
    p.add_argument("--rows", type=int, default=1, help="rows per sequence (default 1)")
    p.add_argument("--calls", type=int, default=2000, help="timed calls per stage")
    args = p.parse_args(argv)
    nested = fixed_batch(args.batch, args.rows)
    config = impl.PackConfig(tp_size=2, cp_size=4, bucket=512)
    whole = lambda: impl.pack_thd(nested, config, 0)  # noqa: E731
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; B = {args.batch} "
          f"sequences of {args.rows} row(s), tp 2, cp 4, bucket 512, rank 0; median us of "
          f"{args.calls} calls")
    print(f"{'whole pack_thd call':58s} {_median_us(whole, args.calls):8.1f} us "
          f"{ops(whole):4d} ops")
    parts = stages(nested, config)

    def in_a_row() -> None:
        for fn in parts.values():
            fn()

    print(f"{'the stages below, called in a row':58s} {_median_us(in_a_row, args.calls):8.1f} us "
          f"{ops(in_a_row):4d} ops")
    for name, fn in parts.items():
        print(f"  {name:56s} {_median_us(fn, args.calls):8.1f} us {ops(fn):4d} ops")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

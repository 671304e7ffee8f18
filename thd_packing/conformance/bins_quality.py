"""Quality of a binner's bins, measured, never judged (spec/bins.md B7): the figures the report
shows beside the rules.

Each bin-tier call adds one `Sample`; `summary` folds them: bins used over Martello and Toth's
L2 bound and over the exact optimum (inputs of at most 9 items), the padding rows the bins'
packs add under tp 2, cp 4 zigzag (the alignment a token budget never sees) and how many of
those packs exceed the capacity in rows, and a balancer's heaviest part over the least it can
be (the mean part, or the heaviest item when that is more).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from thd_packing.reference import PackConfig, plan_thd
from thd_packing.reference import bins as rb

ALIGNED = PackConfig(tp_size=2, cp_size=4)  # every sequence padded to a multiple of 16
_SAMPLES: list[dict[str, Any]] = []


@dataclass
class Sample:
    bound_bins: int = 0  # the binner's bins on inputs with a lower bound measured
    lower_bound: int = 0
    optimum_bins: int = 0  # the binner's bins on inputs small enough for the optimum
    optimum: int = 0
    tokens: int = 0
    rows: int = 0  # the packs' rows under ALIGNED
    packs: int = 0
    over_capacity: int = 0  # packs whose rows under ALIGNED exceed the capacity
    parts_max: int = 0  # partition: the heaviest part's weight, summed over calls
    parts_floor: float = 0.0  # and the least it can be: max(mean part, heaviest item)


def measure_bins(lengths: list[int], pieces: list[list[tuple[int, int, int]]],
                 config: dict[str, Any]) -> None:
    """One call's bins against the bounds, and their packs under ALIGNED."""
    bconfig = rb.as_config({**config, "order": "placement"})
    sample = Sample()
    free = bconfig.min_bins == 1 and bconfig.bins_multiple_of == 1  # no count asked for
    if free and bconfig.algorithm != "wrapped" and bconfig.overflow == "reject":
        sample.bound_bins = len(pieces)
        sample.lower_bound = rb.lower_bound(lengths, bconfig)
        if len(lengths) <= 9:
            sample.optimum = rb.optimum(lengths, bconfig)
            sample.optimum_bins = len(pieces)
    for b in pieces:
        sizes = [length for _, _, length in b]
        total = plan_thd(sizes, ALIGNED).total if b else 0
        sample.tokens += sum(sizes)
        sample.rows += total
        sample.packs += 1
        sample.over_capacity += total > bconfig.capacity
    _SAMPLES.append(asdict(sample))


def measure_parts(weights: list[int], parts: list[list[int]]) -> None:
    sums: list[int] = [sum(weights[i] for i in part) for part in parts]
    heaviest = max(sums, default=0)
    if heaviest:
        floor = max(sum(sums) / len(sums), float(max(weights)))
        _SAMPLES.append(asdict(Sample(parts_max=heaviest, parts_floor=floor)))


def take() -> list[dict[str, Any]]:
    """The samples since the last call (one test's), for its report entry."""
    out = list(_SAMPLES)
    _SAMPLES.clear()
    return out


def summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's figures from every sample of a run."""
    total = {key: sum(s[key] for s in samples) for key in asdict(Sample())}
    out: dict[str, Any] = {"calls": len(samples)}
    if total["lower_bound"]:
        out["bins_over_l2_pct"] = round(
            100.0 * (total["bound_bins"] / total["lower_bound"] - 1), 2)
    if total["optimum"]:
        out["bins_over_optimum_pct"] = round(
            100.0 * (total["optimum_bins"] / total["optimum"] - 1), 2)
    if total["tokens"]:
        out["padding_rows_pct_tp2_cp4"] = round(
            100.0 * (total["rows"] - total["tokens"]) / total["tokens"], 2)
        out["packs_over_capacity_tp2_cp4"] = f"{total['over_capacity']}/{total['packs']}"
    if total["parts_floor"]:
        out["heaviest_part_over_floor_pct"] = round(
            100.0 * (total["parts_max"] / total["parts_floor"] - 1), 2)
    return out

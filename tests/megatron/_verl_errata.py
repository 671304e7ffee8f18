"""Where a listed erratum lets the adapter differ from verl 0.9.1 (spec/errata.md), per row."""

from __future__ import annotations

from thd_packing import reference
from thd_packing.reference.rowmap import row_map


def erratum_slots(lengths: list[int], cfg: reference.PackConfig, rank: int,
                  need_roll: bool) -> dict[int, set[str]]:
    """{local row: {"value", "pos"}} of the slots where E-3, E-4 or E-5 applies; the plan must
    be the spec's (E-1, E-2 change the plan and are checked on the plan itself)."""
    if not need_roll:
        return {}
    plan = reference.plan_thd(lengths, cfg)
    cp, zigzag = cfg.cp_size, cfg.cp_layout == "zigzag"
    out: dict[int, set[str]] = {}
    rows = row_map(plan, cfg, rank)
    for k, src in enumerate(rows):
        n, p = lengths[src.seq], int(plan.seqlens_padded[src.seq])
        if src.offset >= n:
            out.setdefault(k, set()).add("value")  # E-4: verl rolls the next row's value in
        if zigzag and cp > 1 and src.offset < n - 1:
            c = p // (2 * cp)
            if src.offset in ((rank + 1) * c - 1, p - rank * c - 1):
                out.setdefault(k, set()).add("pos")  # E-5: verl restores the un-rolled id
    if zigzag and cp > 1 and rows:
        for i, p in enumerate(plan.seqlens_padded.tolist()):
            if p == 0:  # E-3: verl writes 0 and a stale id into the row before this start
                k = (int(plan.cu_seqlens_padded[i]) // cp - 1) % len(rows)
                out.setdefault(k, set()).update({"value", "pos"})
    return out

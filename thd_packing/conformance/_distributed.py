"""One rank of the distributed check: `python -m thd_packing.conformance._distributed JOB RANK`.

Joins a gloo process group on 127.0.0.1 and, for each part of the job (one cp each, all in
this one world), packs its shard of every case with the target, unpacks through the target's
`distributed_unpack` (a real all_gather over its CP group), does the same for every mask case
through `packed_preprocess` / `packed_distributed` (verl's mask entry points), and pickles the
results (or each part's error) next to the job file. The group is always destroyed.
"""

from __future__ import annotations

import pickle
import sys
import traceback
from pathlib import Path
from typing import Any

from thd_packing.conformance.gloo import joined


def run(job_path: Path, rank: int) -> int:
    with joined(job_path, rank) as (job, out_path):
        return _body(job, out_path, rank)


def _body(job: dict[str, Any], out_path: Path, rank: int) -> int:
    import torch.distributed as dist

    from thd_packing.conformance.targets import load_target

    target = load_target(job["target"])
    # Each part runs at its own cp: the world holds world // cp CP groups of consecutive ranks.
    # Every rank creates every group of every part, in the same order, before any part runs;
    # with more than one group, a gather over the wrong group (the default one) cannot go
    # unnoticed.
    world = job["world"]
    groups = {cp: [dist.new_group(list(range(g * cp, (g + 1) * cp))) for g in range(world // cp)]
              if world > cp else [dist.group.WORLD] for cp in (part["cp"] for part in job["parts"])}
    parts = []
    for part in job["parts"]:
        cp = part["cp"]
        parts.append(_part(target, part, groups[cp][rank // cp], rank % cp))
    out_path.write_bytes(pickle.dumps({"parts": parts}))
    return 1 if any("error" in part for part in parts) else 0


def _part(target: Any, part: dict[str, Any], group: Any, cp_rank: int) -> dict[str, Any]:
    """One cp's cases: the unpack results, the mask cases' results, or the error."""
    current: Any = None
    try:
        results = []
        for case in part["cases"]:
            current = case
            seqs = case.batch.arrays()
            got = target.pack(seqs, dict(case.config), cp_rank, need_roll=case.need_roll,
                              pad_value=case.pad_value)
            outs, grad = target.distributed_unpack(got.rows, got.meta, dict(case.config),
                                                   cp_rank, group)
            results.append({"outputs": outs, "grad": grad})
        packed = []
        for case in part["packed"]:  # verl's mask entry points (R-MEG-8, R-MEG-9)
            current = case
            from thd_packing import reference

            values, mask = case.arrays()
            plan = reference.plan_thd(list(case.lengths), case.ref_config())
            rows, _ = target.packed_preprocess(values, mask, case.config, cp_rank)
            out, grad = target.packed_distributed(rows[0], plan.cu_seqlens_padded, mask,
                                                  case.config, cp_rank, group)
            packed.append({"output": out, "grad": grad})
        return {"results": results, "packed": packed}
    except BaseException:
        return {"error": f"case {current!r}:\n{traceback.format_exc()}"}


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]), int(sys.argv[2])))

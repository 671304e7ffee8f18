"""One rank of the distributed check: `python -m conformance._distributed JOB RANK`.

Joins a gloo process group on 127.0.0.1, packs its shard of every case with the target,
unpacks through the target's `distributed_unpack` (a real all_gather), does the same for every
mask case through `packed_preprocess` / `packed_distributed` (verl's mask entry points), and
pickles the results next to the job file. The group is always destroyed, also on error.
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

    current: Any = None
    try:
        from thd_packing.conformance.targets import load_target

        target = load_target(job["target"])
        # The world holds world // cp CP groups of consecutive ranks; every rank must create
        # every group, in the same order. With more than one group, a gather over the wrong
        # group (the default one) cannot go unnoticed.
        cp = job["cp"]
        groups = [dist.new_group(list(range(g * cp, (g + 1) * cp)))
                  for g in range(job["world"] // cp)] if job["world"] > cp else [dist.group.WORLD]
        group = groups[rank // cp]
        cp_rank = rank % cp
        results = []
        for case in job["cases"]:
            current = case
            seqs = case.batch.arrays()
            got = target.pack(seqs, dict(case.config), cp_rank, need_roll=case.need_roll,
                              pad_value=case.pad_value)
            outs, grad = target.distributed_unpack(got.rows, got.meta, dict(case.config),
                                                   cp_rank, group)
            results.append({"outputs": outs, "grad": grad})
        packed = []
        for case in job.get("packed", []):  # verl's mask entry points (R-MEG-8, R-MEG-9)
            current = case
            from thd_packing import reference

            values, mask = case.arrays()
            plan = reference.plan_thd(list(case.lengths), case.ref_config())
            rows, _ = target.packed_preprocess(values, mask, case.config, cp_rank)
            out, grad = target.packed_distributed(rows[0], plan.cu_seqlens_padded, mask,
                                                  case.config, cp_rank, group)
            packed.append({"output": out, "grad": grad})
        out_path.write_bytes(pickle.dumps({"results": results, "packed": packed}))
        return 0
    except BaseException:
        error = f"case {current!r}:\n{traceback.format_exc()}"
        out_path.write_bytes(pickle.dumps({"error": error}))
        return 1


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]), int(sys.argv[2])))

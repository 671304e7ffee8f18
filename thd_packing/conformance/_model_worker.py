"""One rank of the model tier's CP run: `python -m conformance._model_worker JOB RANK`.

Joins a gloo world on 127.0.0.1, creates one CP group of ranks 0..cp-1 for every cp the job
asks for (every rank creates every group, in the same order), runs each item's shard of its
rank through the model's CP consumer (`model.run_rank`), and pickles the runs next to the job
file. The target is not loaded here: the shards are the target's packs as plain data. The group
is always destroyed, also on error.
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
        from thd_packing.conformance import model

        net = model.build_model(job["seed"])
        groups = {cp: dist.new_group(list(range(cp)))
                  for cp in sorted({item["cp"] for item in job["items"]})}
        runs: list[Any] = []
        for item in job["items"]:
            current = {k: item[k] for k in ("id", "cp", "layout", "consumer")}
            if rank >= item["cp"]:
                runs.append(None)
                continue
            runs.append(model.run_rank(net, item["shards"], item["seqs"], item["cp"],
                                       item["layout"], rank, item["consumer"],
                                       groups[item["cp"]]))
        out_path.write_bytes(pickle.dumps({"runs": runs}))
        return 0
    except BaseException:
        out_path.write_bytes(pickle.dumps(
            {"error": f"item {current!r}:\n{traceback.format_exc()}"}))
        return 1


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]), int(sys.argv[2])))

"""One rank of the model tier's CP run: `python -m conformance._model_worker JOB RANK`.

Joins a gloo world on 127.0.0.1, creates one CP group of ranks 0..cp-1 for every cp the job
asks for (every rank creates every group, in the same order), runs each item's shard of its
rank through the model's CP consumer (`model.run_rank`), and pickles the runs next to the job
file. The target is not loaded here: the shards are the target's packs as plain data. The group
is always destroyed, also on error.
"""

from __future__ import annotations

import datetime
import pickle
import sys
import traceback
from pathlib import Path
from typing import Any


def run(job_path: Path, rank: int) -> int:
    job: dict[str, Any] = pickle.loads(job_path.read_bytes())
    out_path = job_path.with_name(f"rank{rank}.pkl")
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{job['port']}", rank=rank,
        world_size=job["world"], timeout=datetime.timedelta(seconds=job["timeout"]),
    )
    current: Any = None
    try:
        from conformance import model

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
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]), int(sys.argv[2])))

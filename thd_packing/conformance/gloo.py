"""A gloo world of worker processes on 127.0.0.1, for the checks that need real collectives.

`launch` (the test side) writes a job, starts one `python -m <worker> JOB RANK` per rank, waits
with a bound and always reaps them, then reads each rank's pickled result. `joined` (the worker
side) loads the job and holds the process group for the worker's body, destroying it also on
error. Workers: conformance/_distributed.py (unpack), conformance/_model_worker.py (model).
"""

from __future__ import annotations

import datetime
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # holds thd_packing/


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(worker: str, job: dict[str, Any], tmp: Path, world: int,
           wait_s: float) -> list[dict[str, Any]]:
    """Run `worker` on `world` ranks of one gloo world; each rank's result dict, in rank order
    (a rank that failed holds "error"). RuntimeError, with the rank's log, when a rank wrote
    no result."""
    job_path = tmp / "job.pkl"
    job_path.write_bytes(pickle.dumps({**job, "port": _free_port(), "world": world}))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *sys.path])
    env.setdefault("OMP_NUM_THREADS", "1")
    procs = [subprocess.Popen([sys.executable, "-m", worker, str(job_path), str(rank)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
             for rank in range(world)]
    logs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=wait_s)
            logs.append(out.decode(errors="replace")[-3000:])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    results = []
    for rank in range(world):
        path = tmp / f"rank{rank}.pkl"
        if not path.is_file():
            raise RuntimeError(f"{worker} rank {rank} produced no result; log:\n{logs[rank]}")
        results.append(pickle.loads(path.read_bytes()))
    return results


@contextmanager
def joined(job_path: Path, rank: int) -> Iterator[tuple[dict[str, Any], Path]]:
    """The job and this rank's result path, inside the job's gloo world (always left)."""
    job: dict[str, Any] = pickle.loads(job_path.read_bytes())
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{job['port']}", rank=rank,
        world_size=job["world"], timeout=datetime.timedelta(seconds=job["timeout"]),
    )
    try:
        yield job, job_path.with_name(f"rank{rank}.pkl")
    finally:
        dist.destroy_process_group()

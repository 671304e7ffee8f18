"""A busy host on demand: one bounded, self-terminating spinning process per core.

    with busy_load():  # os.cpu_count() spinners, each gone after `seconds` at the latest
        ...time something...

A trainer's host is rarely idle (data-loader workers, tokenizers, other ranks), and torch's
intra-op thread pool behaves differently when its threads compete for cores: this is how the
benchmark reproduces that. Each spinner exits by itself when its deadline passes or when its
parent dies (its parent pid changes), so a crashed or killed benchmark leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

DEFAULT_SECONDS = 600.0

# Runs in each child: spin until the deadline or until the parent is gone (checked every ~1 ms).
SPIN = """
import os, sys, time
deadline = time.monotonic() + float(sys.argv[1])
parent = int(sys.argv[2])
print("spinning", flush=True)
while os.getppid() == parent and time.monotonic() < deadline:
    for _ in range(20000):
        pass
"""


def start_spinners(count: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    """Start `count` spinners that stop by themselves after `seconds`; returns once all spin."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got count={count}")
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got seconds={seconds}")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SPIN, str(seconds), str(os.getpid())],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    for proc in procs:  # each says so once it runs its loop
        assert proc.stdout is not None
        proc.stdout.readline()
    return procs


def stop_spinners(procs: list[subprocess.Popen[bytes]]) -> None:
    """Terminate the spinners this process started and reap them."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.contextmanager
def busy_load(count: int | None = None, seconds: float = DEFAULT_SECONDS) -> Iterator[int]:
    """One spinning process per core (or `count`) for the duration of the block (at most
    `seconds`); yields how many spin."""
    n = count if count is not None else os.cpu_count() or 1
    procs = start_spinners(n, seconds)
    try:
        yield n
    finally:
        stop_spinners(procs)


def load_average() -> float:
    """The 1-minute load average (what `uptime` prints first)."""
    return os.getloadavg()[0]


if __name__ == "__main__":  # a manual check: `python -m bench.busy 5` spins for 5 s
    with busy_load(seconds=float(sys.argv[1]) if len(sys.argv) > 1 else 5.0) as n:
        print(f"{n} spinners; load {load_average():.2f}")
        time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0)

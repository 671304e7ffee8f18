"""Mutation testing of impl/ against the conformance suite: `nox -s mutation`.

Runs mutmut 3 over impl/ with the tests = this suite (target impl, ci profile; the distributed
check is left out because every mutant would start process groups), in a scratch copy of the
repository so that mutmut's setup.cfg and mutants/ never touch the checkout. Prints the kill
rate and the surviving mutants, and writes reports/mutation.json.

Usage: python conformance/mutation.py [--workdir DIR] [--max-children N] [--keep]
                                      [--sample N [--seed S]] [MUTANT ...]

A full run checks about 1,700 mutants at roughly 5 s each on 2 cores (over 2 hours);
`--sample N` checks a seeded uniform random sample of N mutants and reports the kill rate of
the sample with a 95% interval.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPY = ("impl", "reference", "conformance", "spec", "pyproject.toml")
SETUP_CFG = """[mutmut]
paths_to_mutate = impl/
tests_dir = conformance/
also_copy =
    conformance/
    reference/
    spec/
pytest_add_cli_args =
    --target=impl
    --hypothesis-profile=ci
    -p
    no:cacheprovider
    --deselect=conformance/test_distributed.py
    --report-dir=mutation-reports
"""
GOAL = 0.95


def _copy_tree(work: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", "reports")
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=ignore)
        else:
            shutil.copy2(src, work / name)
    (work / "setup.cfg").write_text(SETUP_CFG)


def _mutmut(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run([sys.executable, "-m", "mutmut", *args], cwd=work, env=env,
                          text=True, capture_output=args[0] != "run")


def _statuses(work: Path) -> dict[str, str]:
    """mutant name -> status, from `mutmut results --all true`."""
    out = _mutmut(work, "results", "--all", "true").stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        match = re.match(r"\s*(\S+__mutmut_\d+):\s*(.+)$", line)
        if match:
            found[match.group(1)] = match.group(2).strip()
    return found


def _all_mutants(work: Path) -> list[str]:
    """Every generated mutant name (mutmut writes them into mutants/**/*.meta)."""
    names: list[str] = []
    for meta in sorted((work / "mutants").rglob("*.meta")):
        names.extend(json.loads(meta.read_text()).get("exit_code_by_key", {}))
    return sorted(names)


def _generate(work: Path) -> None:
    """Generate the mutants without checking any: mutmut stops with "nothing matches" (an
    AssertionError in its output, expected) after writing them."""
    if not _all_mutants(work):
        _mutmut(work, "run", "impl.__no_such_mutant__")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--max-children", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy")
    parser.add_argument("--sample", type=int, default=None, help="check N random mutants")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("mutants", nargs="*", help="only these mutant names (re-check)")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="thd-mutation-"))
    fresh = not (work / "setup.cfg").exists()
    if fresh:
        work.mkdir(parents=True, exist_ok=True)
        _copy_tree(work)
    started = time.time()
    run_args = ["run"]
    if args.max_children:
        run_args += ["--max-children", str(args.max_children)]
    chosen = list(args.mutants)
    if args.sample:
        _generate(work)
        everything = _all_mutants(work)
        chosen = sorted(random.Random(args.seed).sample(everything,
                                                        min(args.sample, len(everything))))
        print(f"checking a random sample of {len(chosen)} of {len(everything)} mutants")
    _mutmut(work, *run_args, *chosen)
    statuses = _statuses(work)
    if chosen:
        statuses = {name: statuses.get(name, "not checked") for name in chosen}
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    judged = sum(n for s, n in counts.items() if s not in ("not checked", "skipped"))
    rate = killed / judged if judged else 0.0
    survivors = sorted(m for m, s in statuses.items() if s in ("survived", "no tests"))
    half = 1.96 * math.sqrt(rate * (1 - rate) / judged) if judged else 0.0
    report = {"tool": "mutmut", "target": "impl", "profile": "ci", "counts": counts,
              "kill_rate": rate, "interval95": [max(0.0, rate - half), min(1.0, rate + half)]
              if args.sample else None, "sample": len(chosen) if args.sample else None,
              "goal": GOAL, "seconds": round(time.time() - started),
              "survivors": survivors, "workdir": str(work)}
    out = ROOT / "reports" / "mutation.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"mutants: {counts}")
    print(f"kill rate: {killed}/{judged} = {rate:.1%} (goal {GOAL:.0%}); report {out}")
    if args.sample:
        low, high = max(0.0, rate - half), min(1.0, rate + half)
        print(f"sample of {len(chosen)}: 95% interval {low:.1%} .. {high:.1%}")
    for name in survivors:
        print(f"  survived: {name}")
    print(f"inspect one: cd {work} && {sys.executable} -m mutmut show <name>")
    if not args.keep and args.workdir is None and rate >= GOAL:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

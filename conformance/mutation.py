"""Mutation testing of impl/ against the conformance suite: `nox -s mutation`.

Runs mutmut 3 over impl/ with the tests = this suite (target impl, ci profile; the distributed
check is left out because every mutant would start process groups), in a scratch copy of the
repository so that mutmut's setup.cfg and mutants/ never touch the checkout. Prints the kill
rate and the surviving mutants, and writes reports/mutation.json.

Usage: python conformance/mutation.py [--workdir DIR] [--max-children N] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--max-children", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy")
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
    _mutmut(work, *run_args, *args.mutants)
    statuses = _statuses(work)
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    judged = sum(n for s, n in counts.items() if s not in ("not checked", "skipped"))
    rate = killed / judged if judged else 0.0
    survivors = sorted(m for m, s in statuses.items() if s in ("survived", "no tests"))
    report = {"tool": "mutmut", "target": "impl", "profile": "ci", "counts": counts,
              "kill_rate": rate, "goal": GOAL, "seconds": round(time.time() - started),
              "survivors": survivors, "workdir": str(work)}
    out = ROOT / "reports" / "mutation.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"mutants: {counts}")
    print(f"kill rate: {killed}/{judged} = {rate:.1%} (goal {GOAL:.0%}); report {out}")
    for name in survivors:
        print(f"  survived: {name}")
    print(f"inspect one: cd {work} && {sys.executable} -m mutmut show <name>")
    if not args.keep and args.workdir is None and rate >= GOAL:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

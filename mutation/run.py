"""Mutation testing of impl/ against the conformance suite: `nox -s mutation`.

Runs mutmut 3 over impl/ with the suite (target impl, ci profile, without the distributed check
and the model tier, which start process groups or a model for every mutant) and impl's own
tests, tests/impl/ (torch-native inputs no protocol method carries; without test_vendoring.py,
which checks the source's imports, and mutmut's trampolines are imports),
in a scratch copy of the repository so that mutmut's files never touch the checkout. Prints
the kill rate and the mutants not killed (marking those RECORD.md does not file), writes
reports/mutation.json and, after a full run, the per-file summary mutation/summary.json that
RECORD.md's table is checked against (tests/mutation/).

Usage: python mutation/run.py [--workdir DIR] [--max-children N] [--keep]
                                      [--sample N [--seed S]] [--no-distributed]
                                      [--distributed-timeout S] [--distributed-budget S]
                                      [MUTANT ...]

`--sample N` checks a seeded random sample of N mutants and reports its kill rate with a 95%
interval. After mutmut, the survivors in the code only a real process group reaches
(impl/megatron.py's postprocess functions and `_cp_info`) are re-checked with
conformance/test_distributed.py under `MUTANT_UNDER_TEST=<name>`; a failure or a hang there is
reported as "killed by the distributed check", apart from mutmut's kill rate. That check first
runs once without a mutant: if it fails, no mutant is re-checked.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mutation.record import NOT_MUTATED, ROOT, SUMMARY, per_file, read_record  # noqa: E402

COPY = ("impl", "thd_packing", "tests", "pyproject.toml")
# The suite on impl, and impl's own tests (torch-native inputs no protocol method carries).
# mutmut runs the tests once in its own process, then forks a child per mutant: a real process
# group made in that first run is inherited by every child, which then hangs joining its
# threads, so the one test that makes one is deselected (like the suite's distributed check).
SETUP_CFG = """[mutmut]
source_paths = impl/
pytest_add_cli_args_test_selection =
    thd_packing/conformance/
    tests/impl/
also_copy =
    thd_packing/
    tests/
pytest_add_cli_args =
    --target=impl
    --hypothesis-profile=ci
    -p
    no:cacheprovider
    -p
    no:xdist
    --deselect=thd_packing/conformance/test_distributed.py
    --deselect=thd_packing/conformance/test_model.py
    --deselect=tests/impl/test_vendoring.py
    --deselect=tests/impl/test_megatron.py::test_real_single_process_group
    --report-dir=mutation-reports
"""
GOAL = 0.95
# Survivors re-checked with the distributed test: the functions only a real group reaches.
DISTRIBUTED_ONLY = re.compile(
    r"(^|\.)megatron\.x_(postprocess_thd_engine|postprocess_packed_seqs|_cp_info)__mutmut_\d+$")
DISTRIBUTED_TEST = ("-m", "pytest", "thd_packing/conformance/test_distributed.py", "--target=impl",
                    "--hypothesis-profile=ci", "-p", "no:cacheprovider", "-p", "no:xdist",
                    "-x", "-q", "--report-dir=mutation-reports-distributed")


def _copy_tree(work: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", "reports",
                                    *NOT_MUTATED)
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


def _run_distributed(work: Path, mutant: str, timeout: float) -> str:
    """Run the distributed check under `mutant` ("" = none) in mutants/: "passed", "failed",
    "timeout" or "error: ..." (pytest could not run the tests, which decides nothing).

    The test starts its own rank processes; a session of their own lets a timeout end them all.
    """
    env = dict(os.environ, MUTANT_UNDER_TEST=mutant)
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.Popen([sys.executable, *DISTRIBUTED_TEST], cwd=work / "mutants", env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout"
    if proc.returncode == 0:
        return "passed"
    if proc.returncode == 1:
        return "failed"
    tail = out.strip().splitlines()[-1:] or [""]
    return f"error: pytest exit {proc.returncode} ({tail[0][:200]})"


def distributed_recheck(work: Path, survivors: list[str], timeout: float,
                        budget: float) -> dict[str, str]:
    """Re-check the postprocess / _cp_info survivors with test_distributed.py.

    Returns mutant -> "killed", "timeout" (also a kill), "survived", "not run" (budget spent
    or the unmutated control failed) or "error: ...".
    """
    chosen = [m for m in survivors if DISTRIBUTED_ONLY.search(m)]
    if not chosen:
        return {}
    started = time.time()
    control = _run_distributed(work, "", timeout)
    if control != "passed":
        print(f"distributed check without a mutant: {control}; no mutant re-checked")
        return {m: "not run" for m in chosen}
    results: dict[str, str] = {}
    for name in chosen:
        if time.time() - started > budget:
            results[name] = "not run"
            continue
        outcome = _run_distributed(work, name, timeout)
        results[name] = {"failed": "killed", "passed": "survived"}.get(outcome, outcome)
        print(f"  distributed check, {name}: {results[name]}")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--max-children", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy")
    parser.add_argument("--sample", type=int, default=None, help="check N random mutants")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-distributed", action="store_true",
                        help="skip re-checking postprocess/_cp_info survivors with "
                        "test_distributed.py")
    parser.add_argument("--distributed-timeout", type=float, default=300.0,
                        help="seconds per mutant for the distributed check (default 300)")
    parser.add_argument("--distributed-budget", type=float, default=1800.0,
                        help="seconds for all distributed re-checks (default 1800)")
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
    ran = _mutmut(work, *run_args, *chosen)
    statuses = _statuses(work)
    if ran.returncode != 0 or all(st == "not checked" for st in statuses.values()):
        # e.g. the unmutated tests failed or did not collect: nothing was judged, and the
        # committed summary must not be overwritten by an empty one.
        print(f"mutmut run failed (exit {ran.returncode}); nothing written")
        return 1
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
    distributed = ({} if args.no_distributed else
                   distributed_recheck(work, survivors, args.distributed_timeout,
                                       args.distributed_budget))
    dist_killed = sorted(m for m, r in distributed.items() if r in ("killed", "timeout"))
    rate_all = (killed + len(dist_killed)) / judged if judged else 0.0
    report = {"tool": "mutmut", "target": "impl", "profile": "ci", "counts": counts,
              "kill_rate": rate, "interval95": [max(0.0, rate - half), min(1.0, rate + half)]
              if args.sample else None, "sample": len(chosen) if args.sample else None,
              "goal": GOAL, "seconds": round(time.time() - started),
              "distributed_check": distributed, "killed_by_distributed_check": dist_killed,
              "kill_rate_with_distributed_check": rate_all,
              "survivors": survivors,
              "workdir": str(work)}
    out = ROOT / "reports" / "mutation.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"mutants: {counts}")
    print(f"kill rate: {killed}/{judged} = {rate:.1%} (goal {GOAL:.0%}); report {out}")
    if args.sample:
        low, high = max(0.0, rate - half), min(1.0, rate + half)
        print(f"sample of {len(chosen)}: 95% interval {low:.1%} .. {high:.1%}")
    if distributed:
        print(f"killed by the distributed check: {len(dist_killed)} of {len(distributed)} "
              f"re-checked postprocess/_cp_info survivors; counting them, "
              f"{killed + len(dist_killed)}/{judged} = {rate_all:.1%}")
    entries = {e.name: e.verdict for e in read_record()}
    left = [m for m, st in statuses.items()
            if st not in ("killed", "timeout", "not checked") and m not in dist_killed]
    if not args.sample and not chosen:
        equivalent = sum(entries.get(m) == "Equivalent" for m in left)
        rate_eq = (judged - len(left)) / (judged - equivalent) if judged > equivalent else 0.0
        report["kill_rate_without_equivalent"] = rate_eq
        print(f"without the {equivalent} recorded as equivalent in RECORD.md: {rate_eq:.1%}")
        summary = {"tool": "mutmut 3.8.1",
                   "tests": "conformance/ (--target=impl, ci profile, without "
                   "test_distributed.py and test_model.py) and tests/impl/",
                   "mutants_per_file": per_file(sorted(statuses)),
                   "not_killed": {m: statuses[m] for m in sorted(left)},
                   "not_checked": sorted(m for m, st in statuses.items() if st == "not checked"),
                   "killed_by_distributed_check": dist_killed,
                   "seconds": report["seconds"]}
        SUMMARY.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
        print(f"per-file summary: {SUMMARY}")
    report["unrecorded"] = [m for m in left if m not in entries]
    out.write_text(json.dumps(report, indent=2) + "\n")
    for name in left:
        note = "" if name in entries else " (not in RECORD.md)"
        print(f"  not killed ({statuses[name]}): {name}{note}")
    print(f"inspect one: cd {work} && {sys.executable} -m mutmut show <name>")
    if not args.keep and args.workdir is None and rate >= GOAL:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Running the conformance suite on a fake target, as the suite's own tests do: a fresh
pytest session in a new interpreter per run, so that its target, profile and report state are
its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def run_suite(target: str, report_dir: Path, *paths: str, profile: str = "dev") -> dict:
    """Run the conformance suite (dev profile, or `profile`: ci is derandomized) on `target`;
    the JSON report it wrote, with the run's terminal output under "_stdout"."""
    cmd = [sys.executable, "-m", "pytest", *(paths or ("thd_packing/conformance",)),
           "--target", target, f"--hypothesis-profile={profile}", "--report-dir",
           str(report_dir), "-q", "-p", "no:cacheprovider"]
    # The fake targets are imported from this folder (a site-packages `tests` package shadows
    # ours).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    reports = list(report_dir.glob("conformance-*.json"))
    assert len(reports) == 1, f"{reports}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(reports[0].read_text())
    report["_stdout"] = proc.stdout
    return report

"""Short Markdown summary of one run_device.sh run, from its env.txt, junit.xml and report.json.

python -m gpu_tests.summarize OUT_DIR PYTEST_RC WALL_SECONDS
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any


def junit_cases(path: Path) -> list[dict[str, Any]]:
    """One dict per testcase: name, file, seconds, outcome, message."""
    if not path.exists():
        return []
    cases = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = tc.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (el.get("message") or el.text or "").strip().splitlines()[0][:300]
                break
        cases.append(
            {
                "name": tc.get("name", ""),
                "file": (tc.get("classname") or "").rsplit(".", 1)[-1],
                "seconds": float(tc.get("time") or 0.0),
                "outcome": outcome,
                "message": message,
            }
        )
    return cases


def summarize(out_dir: Path, rc: int, wall: int) -> str:
    """The summary text."""
    lines = ["# gpu_tests run", ""]
    env = out_dir / "env.txt"
    if env.exists():
        lines += [f"- {line}" for line in env.read_text().splitlines() if line.strip()]
    lines += [
        f"- pytest exit status: {rc}"
        + (" (killed by the time budget)" if rc in (124, 137) else ""),
        f"- wall time: {wall} s",
        "",
    ]
    cases = junit_cases(out_dir / "junit.xml")
    by_outcome = Counter(c["outcome"] for c in cases)
    lines.append(
        "Outcomes: "
        + (", ".join(f"{n} {o}" for o, n in sorted(by_outcome.items())) or "no junit.xml")
    )
    lines += [
        "",
        "| file | passed | failed/error | skipped | seconds |",
        "| --- | --- | --- | --- | --- |",
    ]
    files = sorted({c["file"] for c in cases})
    for f in files:
        mine = [c for c in cases if c["file"] == f]
        n = Counter(c["outcome"] for c in mine)
        secs = sum(c["seconds"] for c in mine)
        lines.append(
            f"| {f} | {n['passed']} | {n['failed'] + n['error']} | {n['skipped']} | {secs:.1f} |"
        )
    skips = Counter(c["message"] for c in cases if c["outcome"] == "skipped")
    if skips:
        lines += ["", "Skip reasons:"] + [f"- {n} x {msg}" for msg, n in skips.most_common()]
    bad = [c for c in cases if c["outcome"] in ("failed", "error")]
    if bad:
        lines += ["", "Failures:"] + [
            f"- {c['file']}::{c['name']}: {c['message']}" for c in bad[:30]
        ]
    report = out_dir / "report.json"
    if report.exists():
        measured = json.loads(report.read_text()).get("measured", {})
        if measured:
            lines += ["", "Measured:"] + [
                f"- {k}: {json.dumps(v)}" for k, v in sorted(measured.items())
            ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    out_dir, rc, wall = Path(argv[1]), int(argv[2]), int(argv[3])
    sys.stdout.write(summarize(out_dir, rc, wall))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))

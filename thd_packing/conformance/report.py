"""The conformance report: the test entries (`outcomes.py`) folded per spec rule, and written as
JSON and Markdown (reports/conformance-<target name>.{json,md}; layout in
conformance/README.md, "Reports").
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from .outcomes import TEST_STATUSES
from .rules import UNDER_FEATURE

# Rule statuses, strongest first ("blocked": its tests failed on other rules or crashed first).
RULE_STATUSES = ("fail", "pass", "blocked", "declined", "skip", "untested")


def _row(text: str) -> dict[str, Any]:
    return {"text": text, "status": "untested", "tests": {}, "failures": [], "skips": [],
            "declined": [], "blocked_by": []}


def fold(entries: list[dict[str, Any]], spec_rules: dict[str, str],
         caps: frozenset[str] | None = None) -> dict[str, dict[str, Any]]:
    matrix = {rule: _row(text) for rule, text in spec_rules.items()}
    for e in sorted(entries, key=lambda e: e["test"]):
        for rule in e.get("blocked_rules", []):
            row = matrix.get(rule)
            if row is not None:
                row["tests"].setdefault(e["test"], "blocked")
                row["blocked_by"] = sorted(set(row["blocked_by"]) | set(e.get("blocked_by", [])))
        for rule in e["rules"]:
            row = matrix.setdefault(rule, _row("(not in spec)"))
            row["tests"][e["test"]] = e["status"]  # overrides "blocked"
            if e["status"] == "fail":
                row["failures"].append({k: e.get(k) for k in ("test", "message",
                                                               "counterexamples")})
            elif e["status"] == "skip":
                row["skips"].append({"test": e["test"], "reason": e.get("reason", "")})
            elif e["status"] == "declined":
                row["declined"] = sorted(set(row["declined"]) | set(e["declined"]))
        for rule in e.get("passed_rules", []):
            matrix.setdefault(rule, _row("(not in spec)"))["tests"][e["test"]] = "pass"
        for side in e.get("side_failures", []):
            for rule in side["rules"]:
                row = matrix.setdefault(rule, _row("(not in spec)"))
                row["tests"][e["test"]] = "fail"
                row["failures"].append({"test": e["test"], "message": side["message"],
                                        "counterexamples": [side["input"]]})
        for rule in e.get("declined_rules", []):
            row = matrix.setdefault(rule, _row("(not in spec)"))
            row["tests"][e["test"]] = "declined"
            row["declined"] = sorted(set(row["declined"]) | set(e["declined"]))
    for row in matrix.values():
        statuses = set(row["tests"].values())
        row["status"] = ("fail" if "fail" in statuses else "pass" if "pass" in statuses
                         else "blocked" if "blocked" in statuses
                         else "declined" if "declined" in statuses
                         else "skip" if statuses else "untested")
    for rule, under in UNDER_FEATURE.items():
        row = matrix.get(rule)
        feature = (under,) if isinstance(under, str) else under  # any one of them
        if (caps is not None and not set(feature) & caps and row
                and row["status"] in ("pass", "blocked")):
            row.update(status="declined", declined=sorted({*row["declined"], *feature}))
    return matrix


def payload(entries: list[dict[str, Any]], matrix: dict[str, dict[str, Any]],
            header: dict[str, Any]) -> dict[str, Any]:
    """The JSON document (schema: conformance/README.md, "The JSON report")."""
    ordered = sorted(entries, key=lambda e: e["test"])
    summary = {s: sum(1 for r in matrix.values() if r["status"] == s) for s in RULE_STATUSES}
    tests = {s: sum(1 for e in ordered if e["status"] == s) for s in TEST_STATUSES}
    tests["crashed"] = sum(1 for e in ordered if e.get("crashed"))
    errors = [{k: e.get(k) for k in ("test", "status", "message", "counterexamples",
                                     "tracebacks", "blocked_rules")}
              for e in ordered if e["status"] in ("target-error", "error") or e.get("tracebacks")]
    return {**header, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "verdict": verdict(summary, tests, matrix), "summary": summary,
            "test_summary": tests,
            "findings": findings(ordered, "fail"), "crashes": findings(ordered, "target-error"),
            "declined": declined_reasons(ordered),
            "rules": {rule: {k: v for k, v in row.items() if k != "text"} | {"text": row["text"]}
                      for rule, row in matrix.items()},
            "target_errors": errors, "tests": ordered}


def verdict(summary: dict[str, int], tests: dict[str, int],
            matrix: dict[str, dict[str, Any]]) -> str:
    """One line: "clean" only where no rule failed, no test crashed or erred and no rule was
    left blocked; otherwise what failed. Either way, what was not judged (blocked, declined,
    untested rules)."""
    dirty = [f"{summary['fail']} rules failed" if summary["fail"] else "",
             f"{tests['crashed']} tests crashed" if tests.get("crashed") else "",
             f"{tests['error']} suite errors" if tests.get("error") else ""]
    unjudged = [f"{summary[s]} {s}" for s in ("blocked", "declined", "untested") if summary[s]]
    declined = sorted({cap for row in matrix.values() if row["status"] == "declined"
                       for cap in row["declined"]})
    head = ", ".join(d for d in dirty if d) or ("clean" if not summary["blocked"] else
                                                "not clean")
    tail = "every rule judged" if not unjudged else "not judged: " + ", ".join(unjudged)
    return f"{head}; {summary['pass']} rules pass; {tail}" + (
        f" (declined: {', '.join(declined)})" if declined else "")


_CALL = re.compile(r"^[^:]*: \w+\((.*)\)\s*$", re.DOTALL)


def failing_input(entry: dict[str, Any]) -> str:
    """The smallest input of a failed test: hypothesis' minimal example without the test's name
    (so that tests given the same input agree), else the test's parameters, else its name."""
    # hypothesis' explain phase adds comments ("# or any other generated value"): not input
    examples = sorted((re.sub(r"(?m)^\s*#.*$|  # .*$", "", e)
                       for e in entry.get("counterexamples") or []), key=len)
    if examples:
        match = _CALL.match(examples[0])
        return " ".join((match.group(1) if match else examples[0]).split()).rstrip(",")
    params = re.search(r"\[(.*)\]$", entry["test"])
    return f"{entry['test'].split('::')[-1]}" if params is None else params.group(0)


def findings(entries: list[dict[str, Any]], status: str) -> list[dict[str, Any]]:
    """Each distinct failing input once, with every rule its tests charge it to (fail) or the
    rules it blocks (target-error), its tests and the first message; smallest input first,
    the model tier's own after the others. A failure a test met on its way (shrunk alone,
    conftest.py) joins the finding that breaks its rules and fewest others (the smallest input
    among those), if any."""
    out: dict[str, dict[str, Any]] = {}

    def add(key: str, rules: list[str], message: str, test: str) -> None:
        item = out.setdefault(key, {"input": key, "rules": [], "tests": [],
                                    "message": message.splitlines()[0:1]})
        item["rules"] = sorted(set(item["rules"]) | set(rules))
        item["tests"].append(test)

    met: list[tuple[dict[str, Any], str]] = []
    for e in entries:
        if status == "fail":
            met += [(side, e["test"]) for side in e.get("side_failures", [])]
        for key, rules, message in _parts(e, status):
            add(key, rules, message, e["test"])
    for side, test in sorted(met, key=lambda m: len(m[0]["input"])):
        shown = sorted((key for key, item in out.items()
                        if set(side["rules"]) <= set(item["rules"])),
                       key=lambda key: (len(out[key]["rules"]), len(key)))
        add(shown[0] if shown else side["input"], side["rules"], side["message"], test)
    for item in out.values():
        item["message"] = item["message"][0] if item["message"] else ""
    return sorted(out.values(), key=lambda f: (_model_tier_only(f["rules"]), len(f["input"]),
                                               f["input"]))


def _parts(e: dict[str, Any], status: str) -> list[tuple[str, list[str], str]]:
    """(input, rules, message) of each failure of entry `e` the list of `status` shows: "fail",
    every distinct failure of a failed test with its own input and rules (a crash fails
    CRASH_RULE); "target-error", each crash with the rules it blocks."""
    crashes = status != "fail"
    if crashes and not (e.get("crashed") or e["status"] == "target-error"):
        return []
    if not crashes and (e["status"] != "fail" or not e["rules"]):
        return []
    rules = e.get("blocked_rules", []) if crashes else e["rules"]
    parts = [part for part in e.get("failures") or [] if part.get("crashed") or not crashes]
    if not parts or not all(part["counterexamples"] for part in parts):
        return [(failing_input(e), rules, e.get("message") or "")]
    if len(parts) == 1 and not crashes:
        parts = [{**parts[0], "rules": rules}]  # every rule the entry charges
    return [(failing_input({"test": e["test"], "counterexamples": part["counterexamples"]}),
             rules if crashes else part["rules"], part["message"]) for part in parts]


def _model_tier_only(rules: list[str]) -> bool:
    """A finding only the model tier makes comes after the contract's and the differential
    tier's, which name the slot and the rule; the model tier shows what it costs a model."""
    return bool(rules) and all(rule.startswith("R-MODEL-") for rule in rules)


def declined_reasons(entries: list[dict[str, Any]]) -> dict[str, str]:
    """Each declined capability with the reason its first declined test gave."""
    out: dict[str, str] = {}
    for e in entries:
        reason = e.get("reason", "")
        for cap in e.get("declined", []):
            out.setdefault(cap, reason.split(": ", 2)[-1] if reason else "")
    return dict(sorted(out.items()))


def stem_for(out_dir: Path, name: str) -> Path:
    return out_dir / f"conformance-{re.sub(r'[^A-Za-z0-9_.-]+', '_', name) or 'target'}"


def write(out_dir: Path, name: str, doc: dict[str, Any],
          matrix: dict[str, dict[str, Any]]) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = stem_for(out_dir, name)
    json_path, md_path = Path(f"{stem}.json"), Path(f"{stem}.md")
    json_path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    md_path.write_text(markdown(doc, matrix))
    return json_path, md_path


def shown(path: Path) -> str:
    """The path relative to the working directory where it lies below it, else absolute."""
    path = path.resolve()
    try:
        return os.path.relpath(path) if Path.cwd() in path.parents else str(path)
    except ValueError:
        return str(path)


def detail(row: dict[str, Any], width: int) -> str:
    if row["failures"]:
        text = (row["failures"][0]["message"] or "").splitlines()
        return text[0][:width] if text else ""
    if row["blocked_by"]:
        blocked = sum(1 for s in row["tests"].values() if s == "blocked")
        text = "blocked by " + ", ".join(row["blocked_by"])
        if row["status"] != "blocked":
            text = f"{blocked} of {len(row['tests'])} tests {text}"
        return text[:width]
    if row["status"] == "declined":
        return ("declined: " + ", ".join(row["declined"]))[:width]
    if row["status"] == "skip" and row["skips"]:
        return row["skips"][0]["reason"][:width]
    return ""


def terminal_lines(doc: dict[str, Any], matrix: dict[str, dict[str, Any]]) -> list[str]:
    """The matrix, then the findings and crashes (the last lines a terminal shows)."""
    lines = []
    for rule, row in matrix.items():
        lines.append(f"{rule:<14} {row['status'].upper():<8} {len(row['tests']):>2} tests  "
                     f"{detail(row, 100)}")
    for err in doc["target_errors"]:
        if err["status"] == "error":
            lines.append(f"SUITE ERROR: {err['test']}: {(err['message'] or '')[:150]}")
    for kind, items in (("FINDING", doc["findings"]), ("CRASH", doc["crashes"])):
        for f in items:
            lines.append(f"{kind} {', '.join(f['rules']) or '-'}: {f['input'][:200]}")
            lines.append(f"    {f['message'][:200]}")
    return lines


def _findings_md(doc: dict[str, Any]) -> list[str]:
    lines = [f"## Findings ({len(doc['findings'])}): each failing input once, smallest first",
             ""]
    for n, f in enumerate(doc["findings"], 1):
        tests = ", ".join(t.split("::")[-1] for t in f["tests"])
        lines += [f"{n}. **{', '.join(f['rules'])}** on `{f['input']}`",
                  f"   {f['message']}", f"   ({len(f['tests'])} tests: {tests})"]
    if not doc["findings"]:
        lines.append("None: no rule failed.")
    lines += ["", f"## Target errors ({len(doc['crashes'])}): the packer crashed on these inputs",
              ""]
    for n, f in enumerate(doc["crashes"], 1):
        lines += [f"{n}. `{f['input']}`: {f['message']}",
                  f"   (blocks {', '.join(f['rules']) or '-'}; {len(f['tests'])} tests)"]
    if not doc["crashes"]:
        lines.append("None.")
    declined = "; ".join(f"{cap} ({why})" for cap, why in doc["declined"].items())
    return [*lines, "", f"**Declined** (never drawn, never failed): {declined or 'nothing'}.", ""]


def _quality_md(doc: dict[str, Any]) -> list[str]:
    """A binner's measured quality (conformance/bins_quality.py): figures, not verdicts."""
    quality = {k: v for k, v in (doc.get("bin_quality") or {}).items() if k != "calls"}
    if not quality:
        return []
    return ["## Bin quality (measured, not judged)", "",
            *(f"- {key.replace('_', ' ')}: {value}" for key, value in quality.items()), ""]


def markdown(doc: dict[str, Any], matrix: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"# THD conformance: target `{doc['name']}` (`{doc['target']}`)",
        "",
        f"**Verdict: {doc['verdict']}.**",
        "",
        f"{doc['description']}; spec {doc['spec_version']}; hypothesis profile "
        f"`{doc['hypothesis_profile']}`; {doc['finished']}.",
        "",
        f"Rules: {doc['summary']}",
        "",
        f"Tests: {doc['test_summary']}",
        "",
        *_quality_md(doc),
        *_findings_md(doc),
        "## Rule matrix",
        "",
        "| Rule | Result | Tests | Declined | Detail |",
        "|---|---|---|---|---|",
    ]
    for rule, row in matrix.items():
        text = detail(row, 200).replace("|", "\\|")
        declined = ", ".join(row["declined"])
        lines.append(f"| {rule} | {row['status']} | {len(row['tests'])} | {declined} | {text} |")
    if doc["target_errors"]:
        lines += ["", "## Tracebacks: target errors and suite errors (charged to no rule)", ""]
        for err in doc["target_errors"]:
            lines += [f"### `{err['test']}` ({err['status']})", "",
                      f"Blocks: {', '.join(err['blocked_rules'] or []) or '-'}.", "",
                      "```", err["message"] or "", "```"]
            for example in err["counterexamples"] or []:
                lines += ["", "```python", example, "```"]
            for tb in err.get("tracebacks") or []:
                lines += ["", "```", tb.rstrip(), "```"]
            lines.append("")
    return "\n".join(lines) + "\n"

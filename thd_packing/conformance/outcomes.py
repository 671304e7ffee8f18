"""One report entry per test outcome: the rules a test passed, failed or left blocked, what it
declined, and the failures it met on its way, as plain JSON, so that pytest-xdist workers hand
them to the controller (`report.py` folds them per rule).
"""

from __future__ import annotations

import json
import re
import traceback
from pathlib import Path
from typing import Any

import pytest

from .protocol import OutputRefused
from .targets import HOMES
from .under_test import TargetError

# Test statuses: "declined" (a feature the target lacks) and "error" (the suite failed) are
# charged to no rule. A crash of the target on a valid input (or a return the protocol does not
# allow) fails CRASH_RULE, the entry marked `crashed`; "target-error" is the status of an entry
# written before crashes were failures (the report still reads it).
TEST_STATUSES = ("pass", "fail", "target-error", "error", "declined", "skip")
CRASH_RULE = "R-CONSUMER-17"
PROPERTY = "thd_conformance_entry"

_DECLINED = re.compile(r"declined capability '([^']+)'")
_FALSIFYING = re.compile(
    r"(?:Falsifying (?:explicit )?example|Failing (?:explicit example|test case)|Fixed case): "
    r".*?(?:\n\)|\Z)", re.DOTALL
)
# Adapter code: a crash whose stack passes through these (or the target's own module) is the
# target's, anything else raised in the checker is the suite's.
_ADAPTER_DIRS = tuple(folder for _, folder in HOMES)


def entry(nodeid: str, cited: list[str], report: Any, call: Any,
          target_files: tuple[str, ...] = ()) -> dict[str, Any]:
    """The report entry of one test phase (call, or a setup that did not pass)."""
    status = "pass" if report.passed else "skip" if report.skipped else "fail"
    out: dict[str, Any] = {"test": nodeid, "rules": cited, "status": status}
    if status == "skip":
        longrepr = report.longrepr
        out["reason"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        declined = _DECLINED.findall(out["reason"])
        if declined:
            out["status"] = "declined"
            out["declined"] = sorted(set(declined))
        return out
    if status == "pass":
        return out
    text = report.longreprtext
    out["counterexamples"] = counterexamples(call, text)
    out["message"] = failure_message(call, text)
    verdicts = [(*classify(leaf, target_files), leaf) for leaf in leaves(call)]
    violated = {rule for kind, rules, _ in verdicts if kind == "rule"
                for rule in rules or cited}
    faults = [(kind, leaf) for kind, _, leaf in verdicts if kind != "rule"]
    if faults:
        out["tracebacks"] = [_traceback(leaf) for _, leaf in faults]
    if any(kind == "target-error" for kind, _ in faults):
        violated.add(CRASH_RULE)  # the crash is a failure; what it kept from being judged blocked
        out["crashed"] = True
    out["failures"] = failures(call, cited, target_files)
    if violated:
        # Charged to the rules the failed checks disprove; the test's other rules were not
        # decided by this run: blocked by those.
        out["rules"] = sorted(violated)
        out["blocked_rules"] = sorted(set(cited) - violated)
        out["blocked_by"] = sorted(violated)
    else:
        out["status"] = "error"
        out["rules"] = []
        out["blocked_rules"] = sorted(cited)
        out["blocked_by"] = [out["status"]]
    return out


def decline(out: dict[str, Any], rules: frozenset[str], cap: str, reason: str) -> None:
    """The test's cited `rules` reported as declined for `cap`, a feature found missing while it
    ran (an optional output no rank gave): neither passed nor blocked by it. A rule its failure
    disproves (on another input) stays failed."""
    if out["status"] in ("skip", "declined"):
        return
    failed = set(out["rules"]) if out["status"] == "fail" else set()
    moved = sorted(rules & {*out["rules"], *out.get("blocked_rules", [])} - failed)
    if moved:
        out["rules"] = [r for r in out["rules"] if r not in moved]
        out["blocked_rules"] = [r for r in out.get("blocked_rules", []) if r not in moved]
        out.update(declined_rules=sorted({*out.get("declined_rules", []), *moved}),
                   declined=sorted({*out.get("declined", []), cap}), reason=reason)
        if out["status"] == "pass" and not out["rules"]:
            out["status"] = "declined"  # it judged none of its rules


def add_side(out: dict[str, Any], side: list[dict[str, Any]]) -> None:
    """Failures of rules the test does not cite, met while it judged its own
    (`under_test.note_violation`): charged to those rules with their input; the test's own
    rules keep the verdict its search gave them."""
    if not side:
        return
    out["side_failures"] = side
    if out["status"] == "pass":
        out.update(status="fail", passed_rules=out["rules"], rules=[])


def clean_skip(rep: Any) -> None:
    """A skip raised inside a hypothesis explicit example carries hypothesis' "Failing explicit
    example: ..." note in its reason; the example is not a failure, so the note is dropped from
    the report and the terminal (`under_test.needs` avoids it altogether)."""
    if rep.skipped and isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3:
        path, lineno, reason = rep.longrepr
        cleaned = _FALSIFYING.sub("", reason).rstrip()
        if cleaned != reason:
            rep.longrepr = (path, lineno, cleaned)


def _raised(call: Any) -> list[BaseException]:
    """The phase's exception and every exception it groups, breadth first."""
    out = [call.excinfo.value] if call is not None and call.excinfo is not None else []
    for exc in out:  # grows while it is read
        out.extend(getattr(exc, "exceptions", None) or [])
    return out


def leaves(call: Any) -> list[BaseException]:
    return [exc for exc in _raised(call) if not getattr(exc, "exceptions", None)]


def classify(leaf: BaseException, target_files: tuple[str, ...]) -> tuple[str, set[str]]:
    """("rule", rules) for a check that disproves rules (a plain assertion: the test's cited
    rules, given as an empty set), ("target-error", ...) for a TargetError or a crash whose
    stack runs through the target's code, ("error", ...) for a crash of the suite itself."""
    if isinstance(leaf, TargetError):
        return "target-error", set()
    if isinstance(leaf, OutputRefused):  # the adapter's glue refused the output as a consumer
        return "rule", {leaf.rule}
    if isinstance(leaf, AssertionError | pytest.fail.Exception):  # a check (pytest.raises too)
        return "rule", set(getattr(leaf, "rules", None) or ())
    if _through_target(leaf, target_files):
        return "target-error", set()
    return "error", set()


def _through_target(exc: BaseException, target_files: tuple[str, ...]) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        try:
            path = Path(filename).resolve()
        except OSError:
            path = Path(filename)
        if str(path) in target_files or any(d in path.parents for d in _ADAPTER_DIRS):
            return True
        tb = tb.tb_next
    return False


def _traceback(exc: BaseException, limit: int = 4000) -> str:
    text = "".join(traceback.format_exception(exc))
    return text if len(text) <= limit else "...\n" + text[-limit:]


def failures(call: Any, cited: list[str], target_files: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each distinct failure hypothesis reported (one per exception of its group): the rules it
    disproves (a crash: CRASH_RULE), its smallest input and its message, so that a test meeting
    failures of different rules reports each with its own input."""
    out = []
    for leaf in leaves(call):
        kind, rules = classify(leaf, target_files)
        if kind == "error":
            continue
        charged = sorted(rules or cited) if kind == "rule" else [CRASH_RULE]
        examples = [example for note in getattr(leaf, "__notes__", None) or []
                    for example in _FALSIFYING.findall(note)]
        first = str(leaf).splitlines()[0] if str(leaf) else ""
        out.append({"rules": charged, "counterexamples": examples,
                    "message": f"{type(leaf).__name__}: {first}"[:2000],
                    **({"crashed": True} if kind == "target-error" else {})})
    return out


def counterexamples(call: Any, text: str) -> list[str]:
    """Hypothesis' minimal failing examples: from the exception notes, else the report text."""
    found = [example for exc in _raised(call) for note in getattr(exc, "__notes__", None) or []
             for example in _FALSIFYING.findall(note)]
    if not found:
        plain = "\n".join(re.sub(r"^E {0,7}", "", line) for line in text.splitlines())
        found = _FALSIFYING.findall(plain)
    return list(dict.fromkeys(found))


def failure_message(call: Any, text: str) -> str:
    exc = call.excinfo.value if call is not None and call.excinfo is not None else None
    if exc is not None:
        found = leaves(call) or [exc]
        return " | ".join(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                          for e in found)[:2000]
    lines = [line for line in text.splitlines() if line.startswith("E ")]
    return "\n".join(lines[:5])


def to_property(item: dict[str, Any]) -> tuple[str, str]:
    return PROPERTY, json.dumps(item, default=str)


def from_properties(properties: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [json.loads(value) for key, value in properties if key == PROPERTY]

"""Suite configuration: the target under test, hypothesis profiles, rule markers, reports.

- `--target NAME` (or THD_TARGET): impl (default), reference, verl, or `module:attr`.
- `--hypothesis-profile`: dev (fast), ci (derandomized, the CI budget), thorough (20x ci).
- Each test carries `@pytest.mark.rules("R-...")`; outcomes are folded per rule into
  reports/conformance-<target>.json and .md, and the matrix is printed at the end.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from conformance import harness
from conformance.rules import spec_rules, spec_version
from conformance.targets import TargetLoadError, load_target

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
CI_EXAMPLES = 100
settings.register_profile("dev", max_examples=8, deadline=None, suppress_health_check=_SLOW)
settings.register_profile(
    "ci", max_examples=CI_EXAMPLES, deadline=None, derandomize=True, database=None,
    suppress_health_check=_SLOW, print_blob=False,
)
settings.register_profile(
    "thorough", max_examples=20 * CI_EXAMPLES, deadline=None, suppress_health_check=_SLOW
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

_RESULTS: list[dict[str, Any]] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("thd conformance")
    group.addoption(
        "--target", action="store", default=None,
        help="implementation under test: impl (default), reference, verl, or module:attr "
        "(also THD_TARGET)",
    )
    group.addoption(
        "--report-dir", action="store", default=None,
        help="where conformance-<target>.json/.md go (default: <rootdir>/reports)",
    )


def _target_name(config: pytest.Config) -> str:
    option = config.getoption("--target")
    env = os.environ.get("THD_TARGET")
    name = option if option is not None else env if env is not None else "impl"
    if not name.strip():
        raise pytest.UsageError("--target / THD_TARGET is empty: name a target")
    return name.strip()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rules(*ids): spec rule IDs the test checks")
    config.addinivalue_line("markers", "meta: a test about the suite itself (no spec rule)")
    config.addinivalue_line("markers", "needs(*caps): capabilities the target must declare")
    name = _target_name(config)
    try:
        obj = load_target(name)
    except TargetLoadError as exc:
        raise pytest.UsageError(str(exc)) from exc
    harness.set_target(obj, name)
    config.stash[_TARGET_KEY] = name


_TARGET_KEY = pytest.StashKey[str]()


def pytest_report_header(config: pytest.Config) -> list[str]:
    target = harness.target()
    caps = ", ".join(sorted(target.capabilities))
    return [
        f"thd conformance: target={harness.target_spec()} ({target.description}); "
        f"spec version {spec_version()}; hypothesis profile {_profile()}",
        f"thd conformance: capabilities: {caps}",
    ]


def _profile() -> str:
    return str(getattr(settings, "_current_profile", None) or "default")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test names the rules it checks (or is a meta test): untraceable tests are errors."""
    missing = [item.nodeid for item in items
               if not _item_rules(item) and item.get_closest_marker("meta") is None]
    if missing:
        raise pytest.UsageError("tests without @pytest.mark.rules(...): " + ", ".join(missing))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@h.needs(...)`: a test of a feature the target declines is skipped as declined before
    it runs (so hypothesis never sees the skip inside an explicit example)."""
    for mark in item.iter_markers("needs"):
        harness.require(*mark.args)


_DECLINED = re.compile(re.escape(harness.DECLINED) + r" '([^']+)'")


def _item_rules(item: pytest.Item) -> list[str]:
    out: list[str] = []
    for mark in item.iter_markers("rules"):
        out.extend(mark.args)
    return sorted(set(out))


_FALSIFYING = re.compile(
    r"(?:Falsifying (?:explicit )?example|Failing (?:explicit example|test case)): "
    r".*?(?:\n\)|\Z)", re.DOTALL
)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    rules = _item_rules(item)
    if item.get_closest_marker("meta") is not None and not rules:
        return report
    if report.when == "call" or (report.when == "setup" and not report.passed):
        status = "pass" if report.passed else "skip" if report.skipped else "fail"
        entry: dict[str, Any] = {"test": item.nodeid, "rules": rules, "status": status}
        if status == "skip":
            longrepr = report.longrepr
            entry["reason"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            declined = _DECLINED.findall(entry["reason"])
            if declined:
                entry["status"] = "declined"
                entry["declined"] = sorted(set(declined))
        if status == "fail":
            text = report.longreprtext
            entry["counterexamples"] = _counterexamples(call, text)
            entry["message"] = _failure_message(call, text)
            violated = _violated_rules(call, rules)
            if violated:
                # Attribute the failure to the rules the failed check disproves; the test's
                # other rules were not decided by this run.
                entry["rules"] = sorted(violated)
                entry["blocked_rules"] = sorted(set(rules) - violated)
        _RESULTS.append(entry)
    return report


def _leaves(call: pytest.CallInfo[None]) -> list[BaseException]:
    out: list[BaseException] = []
    stack = [call.excinfo.value] if call.excinfo is not None else []
    while stack:
        exc = stack.pop(0)
        inner = getattr(exc, "exceptions", None)
        if inner:
            stack.extend(inner)
        else:
            out.append(exc)
    return out


def _violated_rules(call: pytest.CallInfo[None], cited: list[str]) -> set[str]:
    """Rules named by harness.RuleViolation leaves, plus the test's cited rules for any other
    error (a crash or a plain assertion is blamed on everything the test covers)."""
    out: set[str] = set()
    for leaf in _leaves(call):
        out |= set(getattr(leaf, "rules", None) or cited)
    return out


def _counterexamples(call: pytest.CallInfo[None], text: str) -> list[str]:
    """Hypothesis' minimal failing examples: from the exception notes, else the report text."""
    found: list[str] = []
    stack = [call.excinfo.value] if call.excinfo is not None else []
    while stack:
        exc = stack.pop(0)
        stack.extend(getattr(exc, "exceptions", None) or [])
        for note in getattr(exc, "__notes__", None) or []:
            found.extend(_FALSIFYING.findall(note))
    if not found:
        plain = "\n".join(re.sub(r"^E {0,7}", "", line) for line in text.splitlines())
        found = _FALSIFYING.findall(plain)
    return list(dict.fromkeys(found))


def _failure_message(call: pytest.CallInfo[None], text: str) -> str:
    exc = call.excinfo.value if call.excinfo is not None else None
    if exc is not None:
        leaves = getattr(exc, "exceptions", None) or [exc]
        return " | ".join(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                          for e in leaves)[:2000]
    lines = [line for line in text.splitlines() if line.startswith("E ")]
    return "\n".join(lines[:5])


def _fold() -> dict[str, dict[str, Any]]:
    rules = spec_rules()
    matrix: dict[str, dict[str, Any]] = {
        rule: {"text": text, "status": "untested", "tests": {}, "failures": [], "skips": [],
               "declined": []}
        for rule, text in rules.items()
    }
    for entry in _RESULTS:
        for rule in entry.get("blocked_rules", []):
            row = matrix.get(rule)
            if row is not None:
                row["tests"].setdefault(entry["test"], "blocked")
        for rule in entry["rules"]:
            row = matrix.setdefault(rule, {"text": "(not in spec)", "status": "untested",
                                           "tests": {}, "failures": [], "skips": [],
                                           "declined": []})
            row["tests"][entry["test"]] = entry["status"]  # overrides "blocked"
            if entry["status"] == "fail":
                row["failures"].append({k: entry[k] for k in ("test", "message",
                                                               "counterexamples")})
            elif entry["status"] == "skip":
                row["skips"].append({"test": entry["test"], "reason": entry.get("reason", "")})
            elif entry["status"] == "declined":
                row["declined"] = sorted(set(row["declined"]) | set(entry["declined"]))
    for row in matrix.values():
        statuses = set(row["tests"].values())
        # blocked: only cited by tests that failed on another rule first, so not decided;
        # declined: only cited by tests of features the target does not declare.
        row["status"] = ("fail" if "fail" in statuses else "pass" if "pass" in statuses
                         else "blocked" if "blocked" in statuses
                         else "declined" if "declined" in statuses
                         else "skip" if statuses else "untested")
    return matrix


def _report_dir(config: pytest.Config) -> Path:
    chosen = config.getoption("--report-dir")
    return Path(chosen) if chosen else Path(config.rootpath) / "reports"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _RESULTS:
        return
    matrix = _fold()
    name = harness.target_spec()
    counts = {s: sum(1 for r in matrix.values() if r["status"] == s)
              for s in ("pass", "fail", "blocked", "declined", "skip", "untested")}
    payload = {
        "target": name,
        "description": harness.target().description,
        "spec_version": spec_version(),
        "hypothesis_profile": _profile(),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "summary": counts,
        "rules": {rule: {k: v for k, v in row.items() if k != "text"} | {"text": row["text"]}
                  for rule, row in matrix.items()},
        "tests": _RESULTS,
    }
    out_dir = _report_dir(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"conformance-{_safe(name)}"
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    md = _markdown(payload, matrix)
    stem.with_suffix(".md").write_text(md)
    tr = terminalreporter
    tr.section(f"THD conformance matrix: target {name}, spec {spec_version()}")
    for rule, row in matrix.items():
        detail = ""
        if row["failures"]:
            detail = row["failures"][0]["message"].splitlines()[0][:110]
        elif row["status"] == "declined":
            detail = "declined: " + ", ".join(row["declined"])
        elif row["status"] == "skip" and row["skips"]:
            detail = row["skips"][0]["reason"][:110]
        status = row["status"].upper()
        tr.write_line(f"{rule:<12} {status:<8} {len(row['tests']):>2} tests  {detail}")
    tr.write_line(f"rules: {counts}; report: {stem}.json, {stem}.md")


def _markdown(payload: dict[str, Any], matrix: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"# THD conformance: target `{payload['target']}`",
        "",
        f"{payload['description']}; spec {payload['spec_version']}; hypothesis profile "
        f"`{payload['hypothesis_profile']}`; {payload['finished']}.",
        "",
        f"Summary: {payload['summary']}",
        "",
        "| Rule | Result | Tests | Detail |",
        "|---|---|---|---|",
    ]
    for rule, row in matrix.items():
        detail = ""
        if row["failures"]:
            detail = row["failures"][0]["message"].splitlines()[0]
        elif row["status"] == "declined":
            detail = "declined: " + ", ".join(row["declined"])
        elif row["status"] == "skip" and row["skips"]:
            detail = row["skips"][0]["reason"]
        detail = detail.replace("|", "\\|")[:200]
        lines.append(f"| {rule} | {row['status']} | {len(row['tests'])} | {detail} |")
    failures = [(rule, f) for rule, row in matrix.items() for f in row["failures"]]
    if failures:
        lines += ["", "## Failures and minimal counterexamples", ""]
        seen: set[str] = set()
        for rule, failure in failures:
            if failure["test"] in seen:
                continue
            seen.add(failure["test"])
            lines += [f"### `{failure['test']}`", "", f"Rules: {rule} and the test's others.",
                      "", "```", failure["message"], "```"]
            for example in failure["counterexamples"]:
                lines += ["", "```python", example, "```"]
            lines.append("")
    return "\n".join(lines) + "\n"

"""Suite configuration: the target under test, rule markers, reports (the options and
hypothesis profiles are conformance/plugin.py's, registered from here in a checkout run).

- `--target NAME` (or THD_TARGET): impl (default), reference, verl, or `module:attr`.
- `--hypothesis-profile`: dev (fast, the default), ci (derandomized, the CI budget), thorough.
- Each test carries `@pytest.mark.rules("R-...")`; outcomes are folded per rule into
  reports/conformance-<target name>.json and .md (conformance/report.py), and the matrix is
  printed at the end.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import reject, settings
from hypothesis.errors import HypothesisException

from thd_packing.conformance import bins_quality, outcomes, plugin, report
from thd_packing.conformance.protocol import ALL_EMPTY, NotDeclared, describe, zero_length_of
from thd_packing.conformance.rules import spec_version, suite_rules
from thd_packing.conformance.targets import TargetLoadError, load_target
from thd_packing.conformance.under_test import (
    OPTIONAL_OUTPUTS,
    RuleViolation,
    caps,
    decline,
    max_rows,
    not_declared,
    outputs_declined,
    raising,
    require,
    set_cited,
    set_target,
    side_violations,
    target,
    target_spec,
)

_RESULTS: list[dict[str, Any]] = []
_SKIPPED_MODULES: dict[str, str] = {}
_CONFIG: Any = None


plugin.one_thread()  # before the target imports torch


def _profile() -> str:
    return str(getattr(settings, "_current_profile", None) or "default")


# dev, unless --hypothesis-profile chose one already (an installed suite's conftest is loaded
# after hypothesis has applied the option).
if _profile() == "default":
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """A checkout run (the plugin not installed): the plugin's options, from here."""
    if not pluginmanager.has_plugin(plugin.NAME):
        pluginmanager.register(plugin, plugin.NAME)


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
    global _CONFIG
    _CONFIG = config
    name = _target_name(config)
    try:
        obj = load_target(name)
    except TargetLoadError as exc:
        raise pytest.UsageError(str(exc)) from exc
    set_target(obj, name)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"thd conformance: target={target_spec()} ({_description(target())}); "
        f"spec version {spec_version()}; hypothesis profile {_profile()}",
        f"thd conformance: capabilities: {', '.join(sorted(caps()))}",
    ]


def _description(subject: Any) -> str:
    return str(getattr(subject, "description", None) or subject.name)


_SUITE = Path(__file__).resolve().parent


def _in_suite(item: pytest.Item) -> bool:
    """A test of this suite, not one of another folder collected in the same run (the mutation
    runner runs the suite and tests/impl/ together)."""
    return Path(str(item.path)).resolve().is_relative_to(_SUITE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test names the rules it checks (or is a meta test): untraceable tests are errors.
    A packer's tiers are deselected for a target without `pack`, the bin tier for one without
    `bin` or `partition`: their rules are not the target's (`suite_rules(roles)`). The loaded
    profile is known here: the ci profile bounds shrinking (plugin.bound_shrinking)."""
    plugin.bound_shrinking(_profile())
    missing = [item.nodeid for item in items if _in_suite(item)
               and not _item_rules(item) and item.get_closest_marker("meta") is None]
    if missing:
        raise pytest.UsageError("tests without @pytest.mark.rules(...): " + ", ".join(missing))
    roles = _roles()
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        role = "bin" if Path(str(item.path)).name == BIN_TIER else "pack"
        judged = not _in_suite(item) or item.get_closest_marker("meta") is not None
        (keep if judged or role in roles else dropped).append(item)
    if dropped:  # another role's tiers: not run, not in the report (suite_rules(roles))
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


BIN_TIER = "test_bins.py"


def _roles() -> tuple[str, ...]:
    """"pack" for a packer, "bin" for a binner or balancer (conformance/bins_protocol.py)."""
    adapter = target().adapter
    roles: tuple[str, ...] = ("pack",) if callable(getattr(adapter, "pack", None)) else ()
    if any(callable(getattr(adapter, name, None)) for name in ("bin", "partition")):
        roles += ("bin",)
    return roles


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@needs(...)`: a test of a feature the target declines is skipped as declined before
    it runs (so hypothesis never sees the skip inside an explicit example). The rules the test
    cites are known to its checks (`under_test.cited`)."""
    set_cited(_item_rules(item))
    for mark in item.iter_markers("needs"):
        require(*mark.args)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    outcome: BaseException | None = None
    try:
        return (yield)
    except BaseException as exc:
        outcome = exc
        raise
    finally:
        refused = _not_declared(outcome)
        if refused is not None:  # the adapter refused what it declares: a usage error
            not_declared(refused, item.name)
        if not isinstance(outcome, KeyboardInterrupt):  # Ctrl-C starts no search
            _shrink_side_failures(item)


def _not_declared(exc: BaseException | None) -> NotDeclared | None:
    """A NotDeclared the target raised on a call the test made directly (call_target stops the
    run itself), found among the exceptions a test's failure groups or chains."""
    seen: list[BaseException] = [exc] if exc is not None else []
    for e in seen:  # grows while it is read
        if isinstance(e, NotDeclared):
            return e
        seen.extend(x for x in (*(getattr(e, "exceptions", None) or ()), e.__cause__)
                    if x is not None and x not in seen)
    return None


# How a test ends other than by passing: an error, a failed check, a skip.
_ENDS = (Exception, pytest.skip.Exception, pytest.fail.Exception)


def _shrink_side_failures(item: pytest.Item) -> None:
    """Hypothesis shrinks only what a test raises. Each failure met on the test's way
    (`under_test.note_violation`) is searched for again alone: the test rerun with that failure
    raised and every other outcome rejected, so the input recorded for it is the smallest
    hypothesis finds, not the first one met."""
    handle = getattr(getattr(item, "obj", None), "hypothesis", None)
    keys = [tuple(side["rules"]) for side in side_violations()]
    if handle is None or not keys:
        return
    inner = handle.inner_test
    try:
        for key in keys:
            handle.inner_test = _only(inner, key)
            with raising(key):
                try:
                    item.runtest()
                except _ENDS:  # found again (or not): the shortest input is recorded
                    pass
    finally:
        handle.inner_test = inner


def _only(inner: Callable[..., Any], key: tuple[str, ...]) -> Callable[..., Any]:
    """`inner` failing only with a RuleViolation of exactly the rules `key`."""
    @functools.wraps(inner)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return inner(*args, **kwargs)
        except RuleViolation as exc:
            if exc.key == key:
                raise
        except HypothesisException:  # assume() and hypothesis' own control flow
            raise
        except _ENDS:
            pass
        reject()
    return run


def _item_rules(item: pytest.Item) -> list[str]:
    out: list[str] = []
    for mark in item.iter_markers("rules"):
        out.extend(mark.args)
    return sorted(set(out))


def _target_files() -> tuple[str, ...]:
    """Files of the target's own code (its class's module), for telling its crashes apart."""
    try:
        return (str(Path(inspect.getfile(type(target().adapter))).resolve()),)
    except (TypeError, OSError):
        return ()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """The report entry, computed where the test ran (an xdist worker too) and carried to the
    controller in `user_properties`."""
    rep = yield
    if not _in_suite(item):
        return rep
    outcomes.clean_skip(rep)
    rules = _item_rules(item)
    missing = outputs_declined() if rep.when == "call" else []
    side = side_violations() if rep.when == "call" else []
    if item.get_closest_marker("meta") is not None and not rules:
        return rep
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        entry = outcomes.entry(item.nodeid, rules, rep, call, _target_files())
        for output, why in missing:  # never given: its rules are declined, not passed
            outcomes.decline(entry, OPTIONAL_OUTPUTS[output], output, why)
        outcomes.add_side(entry, side)
        quality = bins_quality.take() if rep.when == "call" else []
        if quality:
            entry["quality"] = quality
        rep.user_properties.append(outcomes.to_property(entry))
    if side and rep.passed:  # the run fails on them too, not only the report
        rep.outcome = "failed"
        rep.longrepr = "\n".join(f"{', '.join(s['rules'])}{_whose(s['rules'], rules)} on "
                                  f"{s['input']}: {s['message']}" for s in side)
    return rep


def _whose(met: list[str], cited: list[str]) -> str:
    return "" if set(met) <= set(cited) else " (not this test's rules)"


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module of the suite skipped whole (the model tier without torch): its reason, once."""
    if report.skipped and isinstance(report.longrepr, tuple):  # (path, line, reason)
        path, _, reason = report.longrepr
        _SKIPPED_MODULES[Path(str(path)).name] = str(reason).removeprefix("Skipped: ")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not hasattr(_CONFIG, "workerinput"):  # the controller (or a serial run) collects
        _RESULTS.extend(_entries(report))


def _entries(rep: pytest.TestReport) -> list[dict[str, Any]]:
    return outcomes.from_properties(list(rep.user_properties))


@pytest.fixture(scope="module")
def keeps_zero_length() -> None:
    """Decline where the target omits zero-length sequences (R-META-8): a batch of only empty
    ones leaves it none, and the contract tier's degenerate cases judge what it does then."""
    if zero_length_of(target()) == "omit":
        decline(ALL_EMPTY, describe(ALL_EMPTY))


def _pytest_counts(stats: dict[str, list[Any]]) -> str:
    """Why pytest's counts differ from the report's tests: the same tests, counted otherwise."""
    count = {key: len(stats.get(key, [])) for key in ("passed", "failed", "skipped")}
    return (f"pytest counts the same run as {count['passed']} passed, {count['failed']} "
            f"failed, {count['skipped']} skipped: its passed add the meta tests (no rule, not "
            "in the report) and the tests whose every rule was declined for an output the "
            "target does not give; its failed hold the report's fail, target-error and error; "
            "its skipped are the report's declined and skip")


def _report_dir(config: pytest.Config) -> Path:
    chosen = config.getoption("--report-dir")
    return Path(chosen) if chosen else Path(config.rootpath) / "reports"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _RESULTS or hasattr(config, "workerinput"):
        return
    subject = target()
    matrix = report.fold(_RESULTS, suite_rules(_roles()), caps())
    header = {
        "target": target_spec(),
        "name": str(subject.name),
        "description": _description(subject),
        "capabilities": sorted(caps()),
        "max_rows": max_rows(),
        "spec_version": spec_version(),
        "hypothesis_profile": _profile(),
        "skipped_modules": dict(_SKIPPED_MODULES),
        "bin_quality": bins_quality.summary([q for e in _RESULTS for q in e.get("quality", [])]),
    }
    doc = report.payload(_RESULTS, matrix, header)
    json_path, md_path = report.write(_report_dir(config), str(subject.name), doc, matrix)
    tr = terminalreporter
    tr.section(f"THD conformance matrix: target {subject.name}, spec {spec_version()}")
    for line in report.terminal_lines(doc, matrix):
        tr.write_line(line)
    tr.write_line(f"verdict: {doc['verdict']}")
    tr.write_line(f"rules: {doc['summary']}; tests: {doc['test_summary']}")
    quality = doc.get("bin_quality") or {}
    if quality.get("calls"):
        tr.write_line(f"bin quality (measured, not judged): {quality}")
    tr.write_line(_pytest_counts(tr.stats))
    for module, reason in _SKIPPED_MODULES.items():
        tr.write_line(f"skipped: {module}: {reason}")
    tr.write_line(f"report: {report.shown(json_path)}, {report.shown(md_path)}")

"""The bin tier (conformance/test_bins.py) on fake binners: each planted fault fails the rule
it breaks, a crash on a valid input counts as a failure, an honest binner passes, and a
binner-only target runs the whole suite with every packer test declined."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from thd_packing.conformance import test_bins as tier
from thd_packing.conformance import under_test
from thd_packing.conformance.under_test import RuleViolation

from . import bin_fakes
from .runner import run_suite

TIER = "thd_packing/conformance/test_bins.py"


@pytest.fixture
def as_target() -> Iterator[Callable[[Any], None]]:
    """Set the suite's target in this process (restored after)."""
    saved = dict(under_test._STATE)
    yield lambda fake: under_test.set_target(fake, "fake")
    under_test._STATE.clear()
    under_test._STATE.update(saved)


def _failed_rules(run: Callable[[], None]) -> set[str]:
    """The rules of every failure the run met (hypothesis raises distinct ones as a group)."""
    try:
        run()
    except RuleViolation as violation:
        return set(violation.rules)
    except ExceptionGroup as group:
        matched, rest = group.split(RuleViolation)
        if rest is not None:
            raise
        assert matched is not None
        return {rule for v in _leaves(matched) for rule in v.rules}
    return set()


def _leaves(group: BaseExceptionGroup) -> list[Any]:
    out: list[Any] = []
    for error in group.exceptions:
        out += _leaves(error) if isinstance(error, BaseExceptionGroup) else [error]
    return out


@pytest.mark.parametrize(("fake", "rule"), [
    (bin_fakes.LostExample, "R-BIN-18"),
    (bin_fakes.OverflowingBin, "R-BIN-5"),
    (bin_fakes.UndeclaredSplit, "R-BIN-18"),
    (bin_fakes.Nondeterministic, "R-BIN-18"),
    (bin_fakes.CrashesOnValid, "R-BIN-18"),
])
def test_planted_fault_fails_the_contract(fake: type, rule: str,
                                          as_target: Callable[[Any], None]) -> None:
    as_target(fake())
    assert rule in _failed_rules(tier.test_bin_contract)


def test_accepting_capacity_zero_fails(as_target: Callable[[Any], None]) -> None:
    as_target(bin_fakes.AcceptsZeroCapacity())
    assert _failed_rules(lambda: tier.test_bin_rejects_bad_capacity("zero", 0)) == {"R-BIN-2"}
    as_target(bin_fakes.Honest())
    assert _failed_rules(lambda: tier.test_bin_rejects_bad_capacity("zero", 0)) == set()


def test_honest_binner_passes(as_target: Callable[[Any], None]) -> None:
    as_target(bin_fakes.Honest())
    for test in (tier.test_bin_contract, tier.test_bin_differential,
                 tier.test_first_fit_decreasing_bound):
        assert _failed_rules(test) == set(), test.__name__


def test_binner_only_target_skips_the_packer_tiers(tmp_path: Path) -> None:
    """A packer tier and the bin tier run on a binner: the packer's tests deselected, its rules
    out of the report; the bin rules judged; the quality figures reported."""
    report = run_suite("bin_fakes:Honest", tmp_path, TIER,
                       "thd_packing/conformance/test_contract.py")
    assert report["summary"]["fail"] == 0, report["_stdout"][-2000:]
    assert report["rules"] and all(rule.startswith("R-BIN-") for rule in report["rules"])
    assert report["summary"]["pass"] >= 15
    assert "deselected" in report["_stdout"]
    assert report["bin_quality"]["calls"] > 0

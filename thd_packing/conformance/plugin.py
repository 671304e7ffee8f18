"""The suite's pytest plugin (entry point `pytest11`): its options and hypothesis profiles,
registered before the command line is parsed, so an installed suite runs from anywhere:

    pip install <this repository>
    pytest --pyargs conformance --target mypkg.mod:MyTarget --hypothesis-profile=ci

Nothing else happens on import: the suite's hooks live in conformance/conftest.py and act only
on a run that collects the suite (a checkout run registers this module from there), which also
calls `one_thread`.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, Phase, settings

NAME = "thd_conformance"  # the entry point's name, also used when conftest.py registers it
MODEL_TIER_NEEDS = ("the model tier (R-MODEL-*, test_model.py) needs torch and transformers: "
                    "pip install 'thd-packing[model]' beside your torch")
_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
# Every phase but `explain`: it re-runs a shrunk failure to comment on which parts of it vary
# freely, comments the report strips from the input (report.failing_input), at a cost of many
# runs of the target per failure.
_PHASES = [phase for phase in Phase if phase is not Phase.explain]
CI_EXAMPLES = 100
# The ci profile's bound on one failing test's shrinking (hypothesis' own is 300 s a test): a
# failing peer's full run stays within minutes on a busy host, and a shrink cut short still
# reports the smallest input it reached.
CI_SHRINK_SECONDS = 20
settings.register_profile("dev", max_examples=8, deadline=None, suppress_health_check=_SLOW,
                          phases=_PHASES)
settings.register_profile(
    "ci", max_examples=CI_EXAMPLES, deadline=None, derandomize=True, database=None,
    suppress_health_check=_SLOW, print_blob=False, phases=_PHASES,
)
settings.register_profile(
    "thorough", max_examples=20 * CI_EXAMPLES, deadline=None, suppress_health_check=_SLOW,
    phases=_PHASES,
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("thd conformance")
    group.addoption(
        "--target", action="store", default=None,
        help="packer under test: a built-in name (impl, reference, verl, ...: a file of "
        "thd_packing/conformance/targets/ or peers/) or module:attr (also THD_TARGET)",
    )
    group.addoption(
        "--report-dir", action="store", default=None,
        help="where conformance-<target>.json/.md go (default: <rootdir>/reports)",
    )


def one_thread() -> None:
    """One torch thread per process, unless the caller chose a number: the suite's inputs are
    small, and torch's OpenMP threads only spin on them; on a busy host they wait on each
    other (a model-tier test took 23.5 s with two threads beside one busy process on a 2-core
    machine, 3.6 s with one). Called where the suite (or this repository's tests) is
    collected, before the target imports torch; the worker processes inherit it."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch = sys.modules.get("torch")
    if torch is not None and os.environ["OMP_NUM_THREADS"] == "1":
        torch.set_num_threads(1)


def bound_shrinking(profile: str) -> None:
    """Under the ci profile, stop shrinking a failing test after CI_SHRINK_SECONDS (hypothesis
    reads the bound from its engine module; no setting holds it); other profiles keep
    hypothesis' own."""
    from hypothesis.internal.conjecture import engine

    default = getattr(engine, "_THD_DEFAULT_SHRINK_SECONDS", engine.MAX_SHRINKING_SECONDS)
    engine._THD_DEFAULT_SHRINK_SECONDS = default  # type: ignore[attr-defined]
    engine.MAX_SHRINKING_SECONDS = CI_SHRINK_SECONDS if profile == "ci" else default

"""The ci profile bounds how long one failing test shrinks; other profiles keep hypothesis' own
bound."""

from __future__ import annotations

from hypothesis.internal.conjecture import engine

from thd_packing.conformance import plugin


def test_ci_profile_bounds_shrinking() -> None:
    before = engine.MAX_SHRINKING_SECONDS
    try:
        plugin.bound_shrinking("ci")
        assert engine.MAX_SHRINKING_SECONDS == plugin.CI_SHRINK_SECONDS <= 30
        plugin.bound_shrinking("thorough")
        assert engine.MAX_SHRINKING_SECONDS > plugin.CI_SHRINK_SECONDS
    finally:
        engine.MAX_SHRINKING_SECONDS = before

"""A plan or config that is not the implementation's own type (capability `api_type_checks`,
R-ERR-1)."""

from __future__ import annotations

from typing import Any

import pytest

import reference

from . import harness as h
from .protocol import plain_meta
from .rejection import BASE_CONFIG, two_sequences

FOREIGN: dict[str, Any] = {"dict": lambda meta, config: (dict(meta), dict(config)),
           "str": lambda meta, config: ("plan", "config"),
           "tuple": lambda meta, config: (tuple(meta.values()), tuple(config.values()))}


@h.needs("api_type_checks")
@pytest.mark.rules("R-ERR-1")
@pytest.mark.parametrize("field", ["plan", "config"])
@pytest.mark.parametrize("kind", sorted(FOREIGN))
def test_reject_foreign_plan_or_config(field: str, kind: str) -> None:
    """unpack_thd / pack_thd called with a plan or config that is not the implementation's
    Plan / PackConfig (capability `api_type_checks`): TypeError whose message names the field
    and the type it got, as the reference's does; shards and batch unchanged."""
    config = dict(BASE_CONFIG)
    seqs = two_sequences()
    ref_cfg = reference.PackConfig(**config)
    ref_rows = [reference.pack_thd(seqs, ref_cfg, r)[0] for r in range(2)]
    ref_plan = reference.plan_thd([5, 3], ref_cfg)
    meta = plain_meta(ref_plan)
    bad_plan, bad_config = FOREIGN[kind](meta, config)
    bad: Any = bad_plan if field == "plan" else bad_config
    calls: dict[str, tuple[Any, Any]] = {
        "unpack": (lambda: reference.unpack_thd(ref_rows, bad if field == "plan" else ref_plan,
                                                bad if field == "config" else ref_cfg),
                   lambda: h.target().unpack_as_is(
                       ref_rows, meta, config, **{"plan" if field == "plan" else "config_obj":
                                                  bad})),
    }
    if field == "config":
        calls["pack"] = (lambda: reference.pack_thd(seqs, bad, 0),
                         lambda: h.target().pack_as_is(seqs, bad, 0))
    for api, (ref_call, target_call) in calls.items():
        want = h.outcome(ref_call)
        assert isinstance(want, TypeError), f"reference {api}: {want!r}"
        before = h.snapshot(ref_rows + seqs)
        got = h.outcome(target_call)
        assert h.snapshot(ref_rows + seqs) == before, f"{api} changed its inputs"
        what = f"{api} with a {type(bad).__name__} as {field}"
        h.check_same_rejection(want, got, what, {"R-ERR-1"}, (field,))
        if not h.names_object(bad, str(got)):
            raise h.RuleViolation(f"{what}: the message {str(got)!r} does not name what it got "
                                  f"({type(bad).__name__})", {"R-ERR-1"})


@h.needs("api_type_checks")
@pytest.mark.rules("R-ERR-1")
@pytest.mark.parametrize("kind", sorted(FOREIGN))
def test_plan_rejects_foreign_config(kind: str) -> None:
    """plan with a config that is not the implementation's type (capability
    `api_type_checks`): TypeError naming config and the type it got."""
    config = {"dict": {}, "str": "config", "tuple": ()}[kind]
    got = h.outcome(lambda: h.target().plan_as_is([3, 4], config))
    if not isinstance(got, TypeError):
        raise h.RuleViolation(f"plan with config={config!r}: expected TypeError, got {got!r}",
                              {"R-ERR-1"})
    if not h._names("config", str(got)) or type(config).__name__ not in str(got):
        raise h.RuleViolation(f"plan with config={config!r}: the message {str(got)!r} does not "
                              f"name config and {type(config).__name__}", {"R-ERR-1"})

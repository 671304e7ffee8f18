"""The target under test and what it declares: its capabilities, how a test declines what it
does not support, and how a check ends (RuleViolation, TargetError). The target is the suite's
one piece of mutable state, set once by conftest.py and read through `target()`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest
from hypothesis import assume, settings

from .declines import declined, unknown_fields
from .protocol import (
    CAPABILITIES,
    CONVENTION_DEFAULTS,
    CONVENTION_VALUES,
    Packed,
    capabilities,
    declared_of,
    describe,
    fixed_bucket,
    layout_conventions,
)
from .strategies import PackCase


class RuleViolation(AssertionError):
    """A failed check that knows which rules it disproves: the report charges the failure to
    these rules, not to every rule the test cites (a wrong total is not a wrong row).

    Each set of rules raises its own subclass (`kind_of`): hypothesis tells failures apart by
    exception type and origin, so a test that meets failures of different rules reports and
    shrinks each on its own, and none hides behind another."""

    def __new__(cls, message: str, rules: set[str] | frozenset[str]) -> RuleViolation:
        kind = kind_of(tuple(sorted(rules))) if cls is RuleViolation else cls
        return super().__new__(kind, message, rules)

    def __init__(self, message: str, rules: set[str] | frozenset[str]) -> None:
        super().__init__(f"{message} [{', '.join(sorted(rules))}]")
        self.rules = frozenset(rules)

    @property
    def key(self) -> tuple[str, ...]:
        """The rules, sorted: what tells one failure met on a test's way from another."""
        return tuple(sorted(self.rules))


_KINDS: dict[tuple[str, ...], type[RuleViolation]] = {}


def kind_of(rules: tuple[str, ...]) -> type[RuleViolation]:
    """The RuleViolation subclass of one sorted set of rules, made once (named RuleViolation,
    so messages read the same)."""
    kind = _KINDS.get(rules)
    if kind is None:
        kind = type("RuleViolation", (RuleViolation,), {
            "__qualname__": f"RuleViolation[{', '.join(rules)}]", "__module__": __name__})
        _KINDS[rules] = kind
    return kind


class TargetError(Exception):
    """The target crashed outside its own validation, or returned what the protocol does not
    allow: no rule is decided, the report lists it apart with its traceback."""


_STATE: dict[str, Any] = {"target": None, "spec": None, "met": {}, "cited": frozenset(),
                          "side": {}, "raise": None}


def set_target(obj: Any, spec: str) -> None:
    _STATE["target"], _STATE["spec"] = Subject(obj), spec


def target() -> Any:
    """The target under test (loaded by conftest.py from --target / THD_TARGET)."""
    if _STATE["target"] is None:
        raise RuntimeError("no target loaded: run the suite through pytest (conformance/)")
    return _STATE["target"]


def target_spec() -> str:
    return str(_STATE["spec"])


def set_cited(rules: list[str]) -> None:
    """A test starts: the rules it cites, and no failure met on its way yet."""
    _STATE["cited"], _STATE["side"] = frozenset(rules), {}


def cited() -> frozenset[str]:
    """The rules the running test cites (its `@pytest.mark.rules`, set by conftest.py)."""
    return frozenset(_STATE["cited"])


def note_violation(violation: RuleViolation, case: PackCase) -> None:
    """A failure of rules the running test does not cite, met on `case` while it judges its
    own: recorded, not raised, so the test's search goes on; conftest.py reports it (the
    shortest input per set of rules, written as hypothesis writes it) and fails the test.
    While conftest.py searches the test again for this set of rules alone (`raising`), the
    failure is raised too, so that hypothesis shrinks it."""
    given, key = f"case={case!r}", violation.key
    old = _STATE["side"].get(key)
    if old is None or len(given) < len(old["input"]):
        _STATE["side"][key] = {"rules": list(key), "message": str(violation), "input": given}
    if _STATE["raise"] == key:
        raise violation


@contextlib.contextmanager
def raising(rules: tuple[str, ...]) -> Iterator[None]:
    """Within: `note_violation` raises a failure whose `key` is `rules` as well."""
    _STATE["raise"] = rules
    try:
        yield
    finally:
        _STATE["raise"] = None


def side_violations() -> list[dict[str, Any]]:
    """The failures `note_violation` recorded since the running test started."""
    return list(_STATE["side"].values())


def as_tuple(result: Any, what: str = "pack()") -> tuple[Any, Any, Any]:
    """(rows, position_ids, meta) of a `Packed`; TargetError for anything else."""
    if not isinstance(result, Packed):
        raise TargetError(f"{what} returned {type(result).__name__}, not "
                          "thd_packing.conformance.protocol.Packed")
    return result.rows, result.position_ids, result.meta


class Subject:
    """The adapter as the checks call it: `pack` and the other pack-like optional methods
    return (rows, position_ids, meta); every other attribute is the adapter's own."""

    PACKING = ("pack", "pack_masked")

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.adapter, name)
        if name not in self.PACKING:
            return attr

        def packing(*args: Any, **kwargs: Any) -> tuple[Any, Any, Any]:
            return as_tuple(attr(*args, **kwargs), f"{name}()")
        return packing


def not_declared(exc: BaseException, what: str, args: tuple[Any, ...] = (),
                 kwargs: dict[str, Any] | None = None) -> NoReturn:
    """The adapter raised `NotDeclared` on a call the suite makes only with what it declares:
    stop the run with a usage error naming the declared features the call used (one of them
    the adapter cannot do: take it out of `declared`, or pack it)."""
    kwargs = kwargs or {}
    config = next((a for a in args if isinstance(a, dict)), {})
    seqs = next((a for a in args if isinstance(a, list)), None)
    lengths = None if seqs is None else [getattr(s, "shape", (1,))[0] for s in seqs]
    have = caps()
    asked = [cap for cap in sorted(have) if cap in declined(have - {cap}, config, lengths)]
    if kwargs.get("need_roll") is True:
        asked.append("need_roll")
    if not (type(kwargs.get("pad_value", 0)) is int and kwargs.get("pad_value", 0) == 0):
        asked.append("pad_value")
    features = (f"; the declared features it used: {', '.join(asked)}" if asked
                else "; it uses no optional feature" if args else "")
    call = f" on a call with {config}" if config else ""
    pytest.exit(f"usage error: target {target().name!r} raised NotDeclared in {what} ({exc})"
                f"{call}{features}. Either the adapter cannot do what it declares (take that "
                "out of its `declared`), or it must pack the call",
                returncode=pytest.ExitCode.USAGE_ERROR)


def caps() -> frozenset[str]:
    """The suite's view of the target (protocol.capabilities)."""
    return capabilities(target().adapter)


# A skip for a feature the target does not declare starts with this; the report lists such
# tests as "declined" (per capability), apart from other skips.
DECLINED = "declined capability"


def _declined(cap: str, why: str) -> str:
    return f"{DECLINED} {cap!r}: target {target().name!r}: {why}"


def decline(cap: str, why: str) -> None:
    """Skip the calling test as declined for `cap`, with the reason the report shows."""
    pytest.skip(_declined(cap, why))


def require(*needed: str) -> None:
    """Skip the calling test as declined, with the target's reason, unless it has every
    capability. Inside a hypothesis test with @example use `needs` instead: a skip raised in an
    explicit example makes hypothesis print "Failing explicit example" lines."""
    for cap in needed:
        if cap not in caps():
            decline(cap, describe(cap))


def needs(*needed: str) -> pytest.MarkDecorator:
    """Marker: the test runs only if the target declares every capability (checked by
    conftest.py at setup, before hypothesis runs, so a declined test prints nothing)."""
    unknown = set(needed) - CAPABILITIES
    if unknown:
        raise ValueError(f"needs(): unknown capabilities {sorted(unknown)}")
    return pytest.mark.needs(*needed)


# Optional outputs: position ids (`Packed.position_ids` None) and the meta fields cu_seqlens and
# max_seqlen. A test that met ranks without one and none with it reports the rules that only
# it decides as declined (conftest.py); one that met ranks with it judged the rules there.
POSITIONS = "position_ids"
NO_POSITIONS = "returns no position ids"
OPTIONAL_OUTPUTS = {
    POSITIONS: frozenset({"R-POS-1", "R-POS-2", "R-POS-3", "R-POS-4", "R-TAIL-2", "R-PID-1",
                          "R-PID-2", "R-PID-3", "R-CONSUMER-10"}),
    "cu_seqlens": frozenset({"R-CONSUMER-8"}),
    "max_seqlen": frozenset({"R-CONSUMER-9"}),
}


def note_given(output: str, given: bool) -> None:
    """A rank met by the running test gave the optional `output` (`given`) or not."""
    _STATE["met"].setdefault(output, set()).add(given)


def outputs_declined() -> list[tuple[str, str]]:
    """The optional outputs the ranks met since the last call (one test's run) never gave,
    each with the reason its rules are declined, worded as a declined skip's."""
    met, _STATE["met"] = _STATE["met"], {}
    why = {POSITIONS: NO_POSITIONS}
    return [(output, f"Skipped: {_declined(output, why.get(output, 'gives no ' + output))}")
            for output, seen in sorted(met.items()) if seen == {False}]


def max_rows() -> int | None:
    """The target's declared `max_rows` (None: no limit)."""
    value = declared_of(target().adapter).max_rows
    return None if value is None else int(value)


def within_rows(rows: int) -> bool:
    limit = max_rows()
    return limit is None or rows <= limit


def require_rows(rows: int, what: str) -> None:
    """Skip as declined when a test would make the target build more rows than `max_rows`."""
    if not within_rows(rows):
        decline("max_rows", f"{what} needs up to {rows} rows, declares max_rows={max_rows()}")


def declined_by(config: dict[str, Any] | None = None, lengths: Any = None,
                trail: tuple[int, ...] = (), need_roll: bool = False,
                pad_value: Any = 0) -> list[str]:
    """The capabilities a case needs that the target does not declare."""
    out = declined(caps(), config, lengths, trail)
    if need_roll and "need_roll" not in caps():
        out.append("need_roll")
    if not (type(pad_value) is int and pad_value == 0) and "pad_value" not in caps():
        out.append("pad_value")
    return out


def with_convention(config: dict[str, Any]) -> dict[str, Any]:
    """The config with the target's fixed convention filled in where it leaves a field out (a
    hand-written config of a test about something else, such as the caller's arrays or a
    rejection, then runs under the target's convention, for the target and the reference)."""
    out = dict(config)
    have = caps()
    if fixed_bucket(have) is not None and out.get("bucket") is None:
        out["bucket"] = fixed_bucket(have)
    for key, by_layout in layout_conventions(have).items():
        out.setdefault(key, by_layout.get(str(out.get("cp_layout", "zigzag"))))
    for key, values in CONVENTION_VALUES.items():
        if key in out or values[CONVENTION_DEFAULTS[key]] in (None, *have):
            continue
        others = [v for v, cap in values.items() if cap is not None and cap in have]
        if len(others) == 1:
            out[key] = others[0]
    return out


def require_config(config: dict[str, Any], *, lengths: Any = None, trail: tuple[int, ...] = (),
                   need_roll: bool = False, pad_value: Any = 0) -> None:
    """Skip as declined a config written once for every target (a worked example, a golden
    vector) that uses a feature or convention value the target does not declare, or a
    convention field it does not implement at all. Inside a @given test use `assume_declared`."""
    require(*declined_by(config=config, lengths=lengths, trail=trail, need_roll=need_roll,
                         pad_value=pad_value), *unknown_fields(caps(), config))


def assume_declared(case: PackCase | None = None, **kwargs: Any) -> None:
    """Drop a case that uses a declined feature: the strategies never draw one, but a pinned
    @example is written once for every target (hypothesis.assume is silent in explicit
    examples)."""
    if case is not None:
        kwargs = {"config": case.config, "lengths": case.batch.lengths,
                  "trail": case.batch.trail, "need_roll": case.need_roll,
                  "pad_value": case.pad_value, **kwargs}
    assume(not declined_by(**kwargs))


def prop_settings(weight: float = 1.0, **kwargs: Any) -> settings:
    """The loaded profile's example count scaled by `weight` and by the target's `cost`
    (a slow target such as verl's Python loops declares cost > 1 to keep runs reasonable)."""
    base = settings().max_examples
    adapter = _STATE["target"].adapter if _STATE["target"] is not None else None
    cost = float(declared_of(adapter).cost or 1.0)
    return settings(max_examples=max(3, round(base * weight / cost)), **kwargs)

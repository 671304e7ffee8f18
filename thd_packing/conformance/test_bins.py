"""The bin tier (spec/bins.md): a binner judged on its own output, then against the algorithm it
claims, then on the input it must refuse; a balancer's parts the same way. Declined for a target
without a `bin` (or `partition`) method. Quality figures are measured on the way (bins_quality)
and shown in the report, never judged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from thd_packing.reference import bins as rb

from . import bins_quality
from .bins_contract import check_bins, read_bins
from .bins_protocol import Binned
from .bins_strategies import bin_cases, declared_of, partition_cases
from .protocol import NotDeclared
from .under_test import RuleViolation, TargetError, decline, prop_settings, target

ALGORITHM_RULE = dict(zip(rb.ALGORITHMS, ["R-BIN-10", "R-BIN-11", "R-BIN-12", "R-BIN-13",
                                          "R-BIN-14", "R-BIN-15"], strict=True))


def _declared() -> Any:
    return declared_of(target().adapter)


def _binner() -> Any:
    method = getattr(target().adapter, "bin", None)
    if not callable(method):
        decline("bin", "has no bin(lengths, config) method: not a binner")
    return method


def _partitioner() -> Any:
    method = getattr(target().adapter, "partition", None)
    if not callable(method):
        decline("partition", "has no partition(weights, k, equal_size) method: not a balancer")
    return method


def _call(lengths: list[int], config: dict[str, Any]) -> Binned:
    out = _binner()(np.asarray(lengths, dtype=np.int64), dict(config))
    if not isinstance(out, Binned):
        raise TargetError(f"bin() returned {type(out).__name__}, not "
                          "thd_packing.conformance.bins_protocol.Binned")
    return out


def _valid_call(lengths: list[int], config: dict[str, Any]) -> Binned:
    """`_call` on an input the rules accept: a refusal or a crash is a failure (R-BIN-18)."""
    try:
        return _call(lengths, config)
    except (TargetError, NotDeclared):
        raise
    except Exception as error:
        raise RuleViolation(f"raised {type(error).__name__} on a valid input: {error}",
                            {"R-BIN-18"}) from error


def _reference(lengths: list[int], config: dict[str, Any]) -> rb.Bins | None:
    """The reference's bins under the declared algorithm (first fit decreasing without one);
    None where the input is one the rules refuse."""
    fields = {**config, "algorithm": config.get("algorithm", "first_fit_decreasing")}
    try:
        return rb.bin_lengths(lengths, rb.as_config(fields))
    except ValueError:
        return None


@pytest.mark.rules("R-BIN-5", "R-BIN-6", "R-BIN-7", "R-BIN-8", "R-BIN-9", "R-BIN-14",
                   "R-BIN-16", "R-BIN-17", "R-BIN-18")
@prop_settings()
@given(case=st.deferred(lambda: bin_cases(_declared())))
def test_bin_contract(case: tuple[list[int], dict[str, Any]]) -> None:
    """Every token once, every bin within the capacity, nothing cut, truncated or dropped but as
    the overflow policy says, the bin count, the order claimed, the same bins twice; a valid
    input binned, one the rules refuse refused with a ValueError."""
    lengths, config = case
    expected = _reference(lengths, config)
    try:
        out = _call(lengths, config)
    except NotDeclared:  # asked within what it declares: a usage error of the adapter
        raise
    except (TypeError, ValueError) as error:
        if expected is None:
            return  # R-BIN-6, R-BIN-17: refused, as the rules say
        rule = "R-BIN-17" if {"min_bins", "bins_multiple_of"} & set(config) else "R-BIN-18"
        raise RuleViolation(f"refused a valid input: {type(error).__name__}: {error}",
                            {rule}) from error
    except TargetError:
        raise
    except Exception as error:  # a crash on a valid input is a failure, not a decline
        if expected is None:
            return
        raise RuleViolation(f"crashed on a valid input: {type(error).__name__}: {error}",
                            {"R-BIN-18"}) from error
    again = _call(lengths, config)
    pieces = check_bins(lengths, out.bins, config, out.fates, again.bins)
    bins_quality.measure_bins(lengths, pieces, config)


def _canonical(pieces: list[list[tuple[int, int, int]]]) -> list[tuple[tuple[int, int, int], ...]]:
    return sorted(tuple(sorted(b)) for b in pieces)


@pytest.mark.rules("R-BIN-4", "R-BIN-10", "R-BIN-11", "R-BIN-12", "R-BIN-13", "R-BIN-14",
                   "R-BIN-15")
@prop_settings()
@given(case=st.deferred(lambda: bin_cases(_declared(), distinct=True)))
def test_bin_differential(case: tuple[list[int], dict[str, Any]]) -> None:
    """The bins of the algorithm the binner claims, bin for bin (as sets of pieces), on lengths
    without ties, so the algorithm is judged, not its tie-break."""
    if not _declared().algorithms:
        decline("algorithm", "claims no algorithm of spec/bins.md B4; judged on the contract")
    lengths, config = case
    algorithm = config["algorithm"]
    expected = _reference(lengths, config)
    assume(expected is not None)
    assert expected is not None
    got = _canonical(read_bins(_valid_call(lengths, config).bins, lengths))
    want = _canonical([[tuple(p) for p in b] for b in expected.bins])  # type: ignore[misc]
    if got != want:
        rules = {ALGORITHM_RULE[algorithm]} | ({"R-BIN-4"} if config["cost"] == "rows" else set())
        raise RuleViolation(f"{algorithm} gives {want}, the binner {got}", rules)


@pytest.mark.rules("R-BIN-11")
@prop_settings()
@given(capacity=st.integers(1, 64), data=st.data())
def test_first_fit_decreasing_bound(capacity: int, data: st.DataObject) -> None:
    """A binner claiming first fit decreasing uses at most 11/9 OPT + 6/9 bins (real tokens,
    no bin count asked, at most 9 examples: the optimum is exact)."""
    if "first_fit_decreasing" not in _declared().algorithms:
        decline("algorithm", "claims no first fit decreasing, so no bound")
    least = 1 if "zero_length" in _declared().lacks else 0
    lengths = data.draw(st.lists(st.integers(least, capacity), min_size=1, max_size=9),
                        label="lengths")
    config = {"capacity": capacity, "algorithm": "first_fit_decreasing", "cost": "tokens",
              "overflow": "reject", "order": _declared().order or "placement"}
    used = len(read_bins(_valid_call(lengths, config).bins, lengths))
    best = rb.optimum(lengths, rb.as_config(config))
    if 9 * used > 11 * best + 6:
        raise RuleViolation(f"{used} bins where the optimum is {best}", {"R-BIN-11"})


DEGENERATE: list[tuple[str, list[int]]] = [("no-examples", []), ("one-empty", [0]),
                                           ("only-empty", [0, 0, 0])]


@pytest.mark.rules("R-BIN-1", "R-BIN-18")
@pytest.mark.parametrize(("what", "lengths"), DEGENERATE, ids=[w for w, _ in DEGENERATE])
def test_bin_degenerate(what: str, lengths: list[int]) -> None:
    """No example (an empty shard, a step with nothing left) gives no bins (R-BIN-1); examples
    of no token (an all-masked row) are binned like any other (R-BIN-18). Judged here once
    each, so that no property test shrinks to them."""
    binner = _binner()
    if lengths and "zero_length" in _declared().lacks:
        decline("zero_length", "takes no example of length 0")
    config = {**_base(), "capacity": 8}
    rule = "R-BIN-18" if lengths else "R-BIN-1"
    try:
        out = binner(np.asarray(lengths, dtype=np.int64), config)
    except NotDeclared:
        raise
    except Exception as error:
        raise RuleViolation(f"{what} {lengths}: raised {type(error).__name__} ({error})",
                            {rule}) from error
    if not isinstance(out, Binned):
        raise TargetError(f"bin() returned {type(out).__name__}, not Binned")
    if not lengths:
        if read_bins(out.bins, []):
            raise RuleViolation(f"no examples gave bins {out.bins!r}", {"R-BIN-1"})
        return
    check_bins(lengths, out.bins, config, out.fates)


BAD_LENGTHS: list[tuple[str, list[Any]]] = [
    ("negative", [3, -1]), ("float", [3, 2.5]), ("bool", [True, 2]),
]
BAD_CAPACITIES: list[tuple[str, Any]] = [("zero", 0), ("negative", -4), ("float", 8.5)]


@pytest.mark.rules("R-BIN-1")
@pytest.mark.parametrize(("what", "lengths"), BAD_LENGTHS, ids=[w for w, _ in BAD_LENGTHS])
def test_bin_rejects_bad_lengths(what: str, lengths: list[Any]) -> None:
    """A length that is negative or not an integer is a TypeError or ValueError, never binned.
    The lengths are handed over as a list of Python objects, as a caller would."""
    binner = _binner()
    if "lengths" in _declared().validated_elsewhere:
        decline("lengths_checks", "declares the lengths validated by its callers")
    _refused(lambda: binner(lengths, {"capacity": 8, **_base()}), f"{what} length", "R-BIN-1")


@pytest.mark.rules("R-BIN-2")
@pytest.mark.parametrize(("what", "capacity"), BAD_CAPACITIES,
                         ids=[w for w, _ in BAD_CAPACITIES])
def test_bin_rejects_bad_capacity(what: str, capacity: Any) -> None:
    binner = _binner()
    if "capacity" in _declared().validated_elsewhere:
        decline("capacity_checks", "declares the capacity validated by its callers")
    _refused(lambda: binner(np.array([1, 1], dtype=np.int64),
                            {**_base(), "capacity": capacity}), f"{what} capacity", "R-BIN-2")


@pytest.mark.rules("R-BIN-3")
def test_bin_rejects_rows_capacity_below_one_token() -> None:
    binner = _binner()
    if "rows" not in _declared().costs:
        decline("rows", "counts tokens only")
    config = {**_base(), "capacity": 8, "cost": "rows", "pack": {"bucket": 512}}
    _refused(lambda: binner(np.array([1], dtype=np.int64), config),
             "a rows capacity below one token's 512 rows", "R-BIN-3")


def _base() -> dict[str, Any]:
    declared = _declared()
    cost = "tokens" if "tokens" in declared.costs else "rows"
    base: dict[str, Any] = {"cost": cost, **({"pack": {}} if cost == "rows" else {}),
                            "overflow": sorted(declared.overflow)[0],
                            "order": declared.order or "placement"}
    if declared.algorithms:
        base["algorithm"] = sorted(declared.algorithms)[0]
    return base


def _refused(call: Any, what: str, rule: str) -> None:
    try:
        call()
    except (TypeError, ValueError):
        return
    except Exception as error:
        raise RuleViolation(f"{what}: raised {type(error).__name__} ({error}), not a TypeError "
                            "or ValueError", {rule}) from error
    raise RuleViolation(f"{what}: accepted", {rule})


@pytest.mark.rules("R-BIN-19", "R-BIN-20")
@prop_settings()
@given(case=st.deferred(lambda: partition_cases(_declared(), distinct=True)))
def test_partition(case: tuple[list[int], int, bool]) -> None:
    """k parts holding every index once, equal item counts where asked (the ranks' equal share
    of micro-batches, R-BIN-20); claiming Karmarkar-Karp, its parts, on weights without ties."""
    weights, k, equal_size = case
    try:
        parts = _partitioner()(list(weights), k, equal_size)
    except (TypeError, ValueError) as error:
        raise RuleViolation(f"refused a valid partition: {error}", {"R-BIN-19"}) from error
    try:
        got = sorted(sorted(int(i) for i in part) for part in parts)
    except TypeError as error:
        raise TargetError(f"partition() returned {parts!r}: not lists of indices") from error
    if len(got) != k or sorted(i for part in got for i in part) != list(range(len(weights))):
        raise RuleViolation(f"{len(got)} parts {got} for k={k} of {len(weights)} items",
                            {"R-BIN-19"})
    if equal_size and {len(part) for part in got} != {len(weights) // k}:
        raise RuleViolation(f"parts of {[len(p) for p in got]} items, asked for equal sizes",
                            {"R-BIN-20"})
    bins_quality.measure_parts(weights, got)
    if "karmarkar_karp" in _declared().algorithms:
        want = sorted(rb.partition(weights, k, equal_size))
        if got != want:
            raise RuleViolation(f"Karmarkar-Karp gives {want}, the balancer {got}", {"R-BIN-19"})

"""Inputs in the target's own terms that NumPy cannot express (spec §1a, R-ERR-1, R-ERR-9):
a device whose arrays hold no values (torch's `meta`, capability `valueless_device`), dtypes
that are no number type (`native_dtypes`) and containers the target must refuse
(`rejected_forms`). Tensor subclasses are batch forms (test_differential.py).

On the valueless device a pack with host lengths must still produce the reference's shapes,
dtypes and plan (R-DEV-2): any host read of a value, any table left on the host, any output made
on the host instead of the batch's device shows here, on a CPU-only machine."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import reference

from .compare import meta_mismatches, names_field, outcome
from .protocol import plain_meta
from .running import call_target, run_reference
from .strategies import Batch, PackCase, configs, pack_cases
from .under_test import (
    RuleViolation,
    TargetError,
    assume_declared,
    caps,
    needs,
    prop_settings,
    require,
    target,
)

CAPS = caps()
TARGET = target()
HOST, VALUELESS = getattr(TARGET, "devices", ("host", "valueless"))
# Form -> None (host lengths) or the field whose values live on the valueless device.
FORMS: dict[str, str | None] = dict(getattr(TARGET, "valueless_forms", {}))
HOST_FORMS = tuple(f for f, field in FORMS.items() if field is None) or ("list",)
DEVICE_FORMS = tuple(f for f, field in FORMS.items() if field is not None)


def _spec_problems(what: str, got: Any, shape: tuple[int, ...], dtype: str
                   ) -> list[tuple[str, str]]:
    """Where an ArraySpec is not an array of `shape` and `dtype` on the valueless device, each
    problem tagged with the rule it breaks."""
    if not all(hasattr(got, k) for k in ("shape", "dtype", "device")):
        raise TargetError(f"{what}: {got!r} is not an ArraySpec")
    problems: list[tuple[str, str]] = []
    if got.device != VALUELESS:
        problems.append(("R-DEV-1", f"{what} is on {got.device!r}, the input on {VALUELESS!r}"))
    if tuple(got.shape) != shape or got.dtype != dtype:
        problems.append(("R-DEV-2", f"{what} is {got.dtype}{list(got.shape)}, the spec's "
                                    f"{dtype}{list(shape)}"))
    return problems


def _raise(problems: list[tuple[str, str]]) -> None:
    if problems:
        raise RuleViolation("; ".join(p for _, p in problems), {r for r, _ in problems})


def _check_sequences(what: str, got: Any, seqs: list[np.ndarray], count_rule: str) -> None:
    """The B sequences back as ArraySpecs of the inputs' shapes and dtypes on the valueless
    device; a wrong count is `count_rule`'s."""
    if len(got) != len(seqs):
        raise RuleViolation(f"{what} returned {len(got)} sequences, the batch has "
                            f"{len(seqs)}", {count_rule})
    problems: list[tuple[str, str]] = []
    for i, (g, s) in enumerate(zip(got, seqs, strict=True)):
        problems += _spec_problems(f"{what}: sequence {i}", g, s.shape, s.dtype.name)
    _raise(problems)


@needs("valueless_device")
@pytest.mark.rules("R-DEV-1", "R-DEV-2", "R-ROW-1", "R-POS-1")
@prop_settings(0.5)
@example(PackCase(config={"cp_size": 2, "min_local_rows": 9}, batch=Batch((0, 0))), "list")
@example(PackCase(config={"cp_size": 2}, batch=Batch((3, 0, 5), trail=(2,), dtype="float32"),
                  need_roll=True), "list")
@given(pack_cases(caps=CAPS), st.sampled_from(HOST_FORMS))
def test_valueless_pack_has_the_reference_shapes(case: PackCase, form: str) -> None:
    """With host lengths every rank packs on the valueless device: rows `[local_rows, *trail]`
    of the batch's dtype and int64 position ids there, the reference's plan."""
    assume_declared(case)
    seqs = case.batch.arrays()
    want = run_reference(case, seqs)
    for rank, w in enumerate(want):
        what = f"pack_valueless({form!r}, rank {rank})"
        result = call_target(what, TARGET.pack_valueless, form, seqs, dict(case.config), rank,
                             need_roll=case.need_roll, pad_value=case.pad_value,
                             rules={"R-DEV-2"})
        if not isinstance(result, tuple | list) or len(result) != 3:
            raise TargetError(f"{what} returned {result!r}, not (rows, positions, meta)")
        rows, pos, meta = result
        problems = _spec_problems(f"{what}: rows", rows, w.rows.shape, w.rows.dtype.name)
        problems += _spec_problems(f"{what}: position ids", pos, w.pos.shape, "int64")
        problems += [("R-DEV-2", f"{what}: plan {p}") for p in meta_mismatches(meta, w.meta)]
        _raise(problems)


@needs("valueless_device", "unpack")
@pytest.mark.rules("R-DEV-1", "R-DEV-2", "R-UNPACK-1")
@prop_settings(0.5)
@example(PackCase(config={"cp_size": 2}, batch=Batch((3, 0, 5), trail=(2,), dtype="int32")))
@given(pack_cases(caps=CAPS, need_roll=False))
def test_valueless_unpack_has_the_input_shapes(case: PackCase) -> None:
    """Unpack of every rank's rows on the valueless device returns `[L_i, *trail]` arrays of the
    rows' dtype there."""
    assume_declared(case)
    seqs = case.batch.arrays()
    want = run_reference(case, seqs)
    meta = plain_meta(want[0].meta)
    got = call_target("unpack_valueless", TARGET.unpack_valueless,
                      [w.rows for w in want], meta, dict(case.config), rules={"R-DEV-2"})
    _check_sequences("unpack_valueless", got, seqs, "R-UNPACK-1")


@needs("valueless_device", "megatron_checks")
@pytest.mark.rules("R-DEV-1", "R-DEV-2", "R-MEG-3")
@prop_settings(0.5)
@example(PackCase(config={"tp_size": 2}, batch=Batch((3, 0, 5), trail=(2,), dtype="float32")))
@example(PackCase(config={"tail": "segment", "bucket": 16}, batch=Batch((4, 1), dtype="int64")))
@given(pack_cases(caps=CAPS, need_roll=False, config=configs(caps=CAPS, cp=st.just(1))))
def test_valueless_postprocess_has_the_input_shapes(case: PackCase) -> None:
    """The Megatron adapter's postprocess (one process, cp_size 1) of an output
    `[1, local_rows, *trail]` on the valueless device returns the B sequences there (R-MEG-3 as
    R-DEV-1 and R-DEV-2 ask of unpack): component i `[L_i, *trail]` of the output's dtype, with
    the PackedSeqParams on the host (its offsets must follow the output to its device)."""
    assume_declared(case)
    seqs = case.batch.arrays()
    want = run_reference(case, seqs)
    meta = plain_meta(want[0].meta)
    got = call_target("megatron_postprocess_valueless", TARGET.megatron_postprocess_valueless,
                      want[0].rows[None], meta, dict(case.config), rules={"R-DEV-2"})
    _check_sequences("megatron_postprocess_valueless", got, seqs, "R-MEG-3")


def _device_error(got: BaseException | None, what: str, rule: str,
                  names: tuple[str, ...]) -> None:
    """ValueError whose message names one of `names`' fields (or every device in `names`)."""
    if not isinstance(got, ValueError):
        raise RuleViolation(f"{what}: expected ValueError, got {got!r}", {rule})
    if not any(names_field(n, str(got)) for n in names):
        raise RuleViolation(f"{what}: the message {str(got)!r} names none of {names}", {rule})


@needs("valueless_device")
@pytest.mark.rules("R-DEV-3")
@pytest.mark.parametrize("form", DEVICE_FORMS or ("none",))
@pytest.mark.parametrize("lengths", [(3, 0, 5), (0,), (4, 4)], ids=str)
def test_lengths_without_values_are_rejected(form: str, lengths: tuple[int, ...]) -> None:
    """Lengths that live on the valueless device (a `lengths=` array, a nested tensor's offsets
    or lengths, a mask) cannot be read: ValueError naming the field the target declares for the
    form, and the device."""
    if form == "none":
        pytest.skip("the target takes no form whose lengths live on the device")
    if 0 in lengths:
        require("zero_length")
    seqs = Batch(lengths, trail=(2,), dtype="float32").arrays()
    what = f"pack_valueless({form!r}) of lengths {list(lengths)}"
    got = outcome(lambda: TARGET.pack_valueless(form, seqs, {"cp_size": 2}, 0))
    _device_error(got, what, "R-DEV-3", (str(FORMS[form]),))
    if not names_field(VALUELESS, str(got)):
        raise RuleViolation(f"{what}: the message {str(got)!r} does not name the device "
                            f"{VALUELESS!r}", {"R-DEV-3"})


@needs("valueless_device", "batch_checks")
@pytest.mark.rules("R-ERR-9")
@prop_settings(0.3)
@given(st.lists(st.booleans(), min_size=2, max_size=5).filter(lambda f: 0 < sum(f) < len(f)))
def test_batch_on_two_devices_is_rejected(on: list[bool]) -> None:
    """A list whose arrays are on the host and on the valueless device: ValueError naming both
    devices, whichever element comes first."""
    seqs = Batch(tuple(range(1, len(on) + 1))).arrays()
    what = f"pack_valueless('list', on={on})"
    got = outcome(lambda: TARGET.pack_valueless("list", seqs, {}, 0, on=on))
    _device_error(got, what, "R-ERR-9", (HOST,))
    _device_error(got, what, "R-ERR-9", (VALUELESS,))


@needs("valueless_device", "unpack", "unpack_checks")
@pytest.mark.rules("R-ERR-11")
@pytest.mark.parametrize("on", [[False, True], [True, False], [False, False, True]], ids=str)
def test_shards_on_two_devices_are_rejected(on: list[bool]) -> None:
    """Shards on the host and on the valueless device: ValueError naming both devices."""
    config = {"cp_size": len(on)}
    seqs = Batch((3, 5)).arrays()
    cfg = reference.PackConfig(**config)  # type: ignore[arg-type]
    packed = [reference.pack_thd(seqs, cfg, r) for r in range(cfg.cp_size)]
    meta = plain_meta(packed[0][2])
    what = f"unpack_valueless(on={on})"
    got = outcome(lambda: TARGET.unpack_valueless([p[0] for p in packed], meta, config, on=on))
    _device_error(got, what, "R-ERR-11", (HOST,))
    _device_error(got, what, "R-ERR-11", (VALUELESS,))


@needs("native_dtypes", "batch_checks")
@pytest.mark.rules("R-ERR-1")
@pytest.mark.parametrize("dtype", tuple(getattr(TARGET, "other_dtypes", {})) or ("none",))
def test_dtype_that_is_no_number_type_is_rejected(dtype: str) -> None:
    """A dtype that is none of bool, integer, floating or complex: TypeError naming it."""
    if dtype == "none":
        pytest.skip("the target lists no such dtype")
    width = np.dtype(f"uint{8 * TARGET.other_dtypes[dtype]}")
    bits = [np.arange(3).astype(width), np.arange(2).astype(width)]
    got = outcome(lambda: TARGET.pack_viewed(bits, dtype, {"cp_size": 2}, 1))
    what = f"pack of dtype {dtype}"
    if not isinstance(got, TypeError):
        raise RuleViolation(f"{what}: expected TypeError, got {got!r}", {"R-ERR-1"})
    if not names_field(dtype, str(got)):
        raise RuleViolation(f"{what}: the message {str(got)!r} does not name {dtype}",
                            {"R-ERR-1"})


ERROR_OF_RULE = {"R-ERR-1": TypeError, "R-ERR-9": ValueError}


@needs("rejected_forms")
@pytest.mark.rules("R-ERR-1", "R-ERR-9")
@pytest.mark.parametrize("form", tuple(getattr(TARGET, "rejected_forms", {})) or ("none",))
def test_container_the_target_refuses(form: str) -> None:
    """A container the target declares it refuses (a strided nested tensor: not a batch form,
    R-ERR-1; the ragged dimension last: arrays whose first dimension is not the length,
    R-ERR-9): the rule's error class, the message naming what is wrong."""
    if form == "none":
        pytest.skip("the target declares no refused container")
    rule, word = TARGET.rejected_forms[form]
    seqs = Batch((3, 5), trail=(2,), dtype="float32").arrays()
    got = outcome(lambda: TARGET.pack_as(form, seqs, {"cp_size": 2}, 0))
    what = f"pack_as({form!r})"
    if not isinstance(got, ERROR_OF_RULE[rule]):
        raise RuleViolation(f"{what}: expected {ERROR_OF_RULE[rule].__name__}, got {got!r}",
                            {rule})
    if not names_field(word, str(got)):
        raise RuleViolation(f"{what}: the message {str(got)!r} does not name {word!r}",
                            {rule})

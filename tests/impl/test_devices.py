"""impl on a device whose arrays hold no values (torch's `meta`, spec section 1a) and on torch
dtypes that are no number type (R-ERR-1, R-ERR-9, R-ERR-11), through the suite's checks.

With host lengths a pack on `meta` must still produce the reference's shapes, dtypes and plan
(R-DEV-2): any host read of a value, any table left on the host, any output made on the host
instead of the batch's device shows here, on a CPU-only machine."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from thd_packing import reference
from thd_packing.conformance.compare import meta_mismatches, names_field, outcome
from thd_packing.conformance.protocol import plain_meta
from thd_packing.conformance.running import call_target, run_reference
from thd_packing.conformance.strategies import Batch, PackCase, configs, pack_cases
from thd_packing.conformance.under_test import RuleViolation, TargetError

from ._impl_api import CAPS, HOST, IMPL, VALUELESS, VALUELESS_FORMS, ci_settings

pytestmark = pytest.mark.usefixtures("suite_target")
TARGET = IMPL
FORMS = VALUELESS_FORMS
HOST_FORMS = tuple(f for f, field in FORMS.items() if field is None)
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


@pytest.mark.rules("R-DEV-1", "R-DEV-2", "R-ROW-1", "R-POS-1")
@ci_settings(0.5)
@example(PackCase(config={"cp_size": 2, "min_local_rows": 9}, batch=Batch((0, 0))), "list")
@example(PackCase(config={"cp_size": 2}, batch=Batch((3, 0, 5), trail=(2,), dtype="float32"),
                  need_roll=True), "list")
@given(pack_cases(caps=CAPS), st.sampled_from(HOST_FORMS))
def test_valueless_pack_has_the_reference_shapes(case: PackCase, form: str) -> None:
    """With host lengths every rank packs on the valueless device: rows `[local_rows, *trail]`
    of the batch's dtype and int64 position ids there, the reference's plan."""
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


@pytest.mark.rules("R-DEV-1", "R-DEV-2", "R-UNPACK-1")
@ci_settings(0.5)
@example(PackCase(config={"cp_size": 2}, batch=Batch((3, 0, 5), trail=(2,), dtype="int32")))
@given(pack_cases(caps=CAPS, need_roll=False))
def test_valueless_unpack_has_the_input_shapes(case: PackCase) -> None:
    """Unpack of every rank's rows on the valueless device returns `[L_i, *trail]` arrays of the
    rows' dtype there."""
    seqs = case.batch.arrays()
    want = run_reference(case, seqs)
    meta = plain_meta(want[0].meta)
    got = call_target("unpack_valueless", TARGET.unpack_valueless,
                      [w.rows for w in want], meta, dict(case.config), rules={"R-DEV-2"})
    _check_sequences("unpack_valueless", got, seqs, "R-UNPACK-1")


@pytest.mark.rules("R-DEV-1", "R-DEV-2", "R-MEG-3")
@ci_settings(0.5)
@example(PackCase(config={"tp_size": 2}, batch=Batch((3, 0, 5), trail=(2,), dtype="float32")))
@example(PackCase(config={"tail": "segment", "bucket": 16}, batch=Batch((4, 1), dtype="int64")))
@given(pack_cases(caps=CAPS, need_roll=False, config=configs(caps=CAPS, cp=st.just(1))))
def test_valueless_postprocess_has_the_input_shapes(case: PackCase) -> None:
    """The Megatron adapter's postprocess (one process, cp_size 1) of an output
    `[1, local_rows, *trail]` on the valueless device returns the B sequences there (R-MEG-3 as
    R-DEV-1 and R-DEV-2 ask of unpack): component i `[L_i, *trail]` of the output's dtype, with
    the PackedSeqParams on the host (its offsets must follow the output to its device)."""
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


@pytest.mark.rules("R-DEV-3")
@pytest.mark.parametrize("form", DEVICE_FORMS)
@pytest.mark.parametrize("lengths", [(3, 0, 5), (0,), (4, 4)], ids=str)
def test_lengths_without_values_are_rejected(form: str, lengths: tuple[int, ...]) -> None:
    """Lengths that live on the valueless device (a `lengths=` array, a nested tensor's offsets
    or lengths, a mask) cannot be read: ValueError naming the field the target declares for the
    form, and the device."""
    seqs = Batch(lengths, trail=(2,), dtype="float32").arrays()
    what = f"pack_valueless({form!r}) of lengths {list(lengths)}"
    got = outcome(lambda: TARGET.pack_valueless(form, seqs, {"cp_size": 2}, 0))
    _device_error(got, what, "R-DEV-3", (str(FORMS[form]),))
    if not names_field(VALUELESS, str(got)):
        raise RuleViolation(f"{what}: the message {str(got)!r} does not name the device "
                            f"{VALUELESS!r}", {"R-DEV-3"})


@pytest.mark.rules("R-ERR-9")
@ci_settings(0.3)
@given(st.lists(st.booleans(), min_size=2, max_size=5).filter(lambda f: 0 < sum(f) < len(f)))
def test_batch_on_two_devices_is_rejected(on: list[bool]) -> None:
    """A list whose arrays are on the host and on the valueless device: ValueError naming both
    devices, whichever element comes first."""
    seqs = Batch(tuple(range(1, len(on) + 1))).arrays()
    what = f"pack_valueless('list', on={on})"
    got = outcome(lambda: TARGET.pack_valueless("list", seqs, {}, 0, on=on))
    _device_error(got, what, "R-ERR-9", (HOST,))
    _device_error(got, what, "R-ERR-9", (VALUELESS,))


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


@pytest.mark.rules("R-ERR-1")
@pytest.mark.parametrize("dtype", tuple(TARGET.other_dtypes))
def test_dtype_that_is_no_number_type_is_rejected(dtype: str) -> None:
    """A dtype that is none of bool, integer, floating or complex: TypeError naming it."""
    width = np.dtype(f"uint{8 * TARGET.other_dtypes[dtype]}")
    bits = [np.arange(3).astype(width), np.arange(2).astype(width)]
    got = outcome(lambda: TARGET.pack_viewed(bits, dtype, {"cp_size": 2}, 1))
    what = f"pack of dtype {dtype}"
    if not isinstance(got, TypeError):
        raise RuleViolation(f"{what}: expected TypeError, got {got!r}", {"R-ERR-1"})
    if not names_field(dtype, str(got)):
        raise RuleViolation(f"{what}: the message {str(got)!r} does not name {dtype}",
                            {"R-ERR-1"})

"""Bad masks and padded batches of the mask form (R-IN-7, capability `mask_form`), and the valid
look-alikes a packer must accept (a read-only, a broadcast and a column-major mask)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import reference

from . import harness as h
from .rejection import BASE_CONFIG, names_one_of

B, S = 3, 16


def _batch() -> tuple[np.ndarray, np.ndarray]:
    """values [3, 16, 2] and a mask with a run, a run plus a stray token and an empty row."""
    values = np.arange(B * S * 2, dtype=np.int64).reshape(B, S, 2)
    mask = np.zeros((B, S), dtype=bool)
    mask[0, 2:9] = True
    mask[1, [0, 1, 2, 3, 4, 11]] = True
    return values, mask


# fault -> (values, mask) from the valid batch, the spec's error class, and what the message
# must name (spec section 11): the field (`mask`; for the padded batch itself "batch" or the
# form's `mask`), the dtype or type it got, or the numbers of the shape it got.
FAULTS: dict[str, tuple[Any, type[BaseException], tuple[str, ...]]] = {
    "mask-uint8": (lambda v, m: (v, m.astype(np.uint8)), TypeError, ("mask", "uint8")),
    "mask-int64": (lambda v, m: (v, m.astype(np.int64)), TypeError, ("mask", "int64")),
    "mask-float32": (lambda v, m: (v, m.astype(np.float32)), TypeError, ("mask", "float32")),
    "mask-list": (lambda v, m: (v, m.tolist()), TypeError, ("mask", "list")),
    "mask-none-like": (lambda v, m: (v, "all"), TypeError, ("mask", "str")),
    "mask-short": (lambda v, m: (v, m[:, :-1]), ValueError, ("mask", "15")),
    "mask-long": (lambda v, m: (v, np.ones((B, S + 1), bool)), ValueError, ("mask", "17")),
    "mask-rows": (lambda v, m: (v, np.ones((B + 1, S), bool)), ValueError, ("mask", "4")),
    "mask-1-d": (lambda v, m: (v, m[0]), ValueError, ("mask", "16")),
    "mask-3-d": (lambda v, m: (v, m[..., None]), ValueError, ("mask", "16", "1")),
    "values-1-d": (lambda v, m: (v[0, :, 0], m[0]), ValueError, ("batch|mask", "16")),
    "values-list": (lambda v, m: (list(v), m), TypeError, ("batch|mask", "list")),
    "values-empty": (lambda v, m: (v[:0], m[:0]), ValueError, ("batch|mask",)),
}


def _expected(values: Any, mask: Any) -> BaseException | None:
    return h.outcome(lambda: reference.pack_masked(values, mask,
                                                   reference.PackConfig(**BASE_CONFIG), 0))


@h.needs("mask_form")
@pytest.mark.rules("R-IN-7", "R-ERR-1", "R-ERR-7")
@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_reject_mask(kind: str) -> None:
    """A mask that is not a bool array (TypeError), of the wrong shape (ValueError), a padded
    batch of fewer than two dimensions or not one array, an empty one (R-ERR-7): the spec's
    class, before anything is written, a message naming the field and what it got."""
    make, expected, names = FAULTS[kind]
    values, mask = make(*_batch())
    ref = _expected(values, mask)
    assert isinstance(ref, expected), f"the reference gives {ref!r} for {kind}"  # the oracle
    before = h.snapshot([values, mask])
    got = h.outcome(lambda: h.target().pack_masked(values, mask, dict(BASE_CONFIG), 0))
    what = f"pack_masked({kind})"
    rules = {"R-IN-7", "R-ERR-7"} if kind == "values-empty" else \
        {"R-IN-7", "R-ERR-1"} if expected is TypeError else {"R-IN-7"}
    if h.snapshot([values, mask]) != before:
        raise h.RuleViolation(f"{what}: the call changed its inputs", rules)
    if not isinstance(got, expected):
        raise h.RuleViolation(f"{what}: expected {expected.__name__}, got {got!r}", rules)
    message = str(got)
    for name in names:
        found = h.names_number(int(name), message) if name.isdigit() else \
            names_one_of(name, message)
        if not found:
            raise h.RuleViolation(f"{what}: the message {message!r} does not name {name!r} "
                                  "(spec section 11: the field and the value)", rules)


@h.needs("mask_form")
@pytest.mark.rules("R-IN-7", "R-IN-6", "R-ROW-1")
@pytest.mark.parametrize("form", ["read-only", "broadcast", "column-major", "strided"])
def test_mask_the_caller_keeps(form: str) -> None:
    """Valid masks that are not a fresh C-ordered array: read-only, broadcast (one row for every
    sequence, stride 0), column-major, every other column of a wider array. Every rank's rows
    equal the reference's pack of `values[i][mask[i]]`; values and mask unchanged."""
    values, mask = _batch()
    if form == "read-only":
        mask.setflags(write=False)
    elif form == "broadcast":
        mask = np.broadcast_to(mask[1], (B, S))
    elif form == "column-major":
        mask = np.asfortranarray(mask)
    else:
        wide = np.zeros((B, 2 * S), dtype=bool)
        wide[:, ::2] = mask
        mask = wide[:, ::2]
    seqs = [values[i][mask[i]] for i in range(B)]
    cfg = reference.PackConfig(**BASE_CONFIG)
    before = (values.tobytes(), mask.tobytes())
    for rank in range(cfg.cp_size):
        want, _, _ = reference.pack_thd(seqs, cfg, rank)
        what = f"pack_masked({form} mask, rank {rank})"
        try:
            rows, _, _ = h.target().pack_masked(values, mask, dict(BASE_CONFIG), rank)
        except Exception as exc:  # the rejection is the failure under test
            raise h.RuleViolation(f"{what}: a valid bool mask, rejected: {exc!r}",
                                  {"R-IN-7"}) from exc
        if not h.same_value(np.asarray(rows), want):
            raise h.RuleViolation(f"{what}: rows {np.asarray(rows).tolist()}, spec "
                                  f"{want.tolist()}", {"R-IN-7", "R-ROW-1"})
        if (values.tobytes(), mask.tobytes()) != before:
            raise h.RuleViolation(f"{what}: wrote into its inputs", {"R-IN-6"})

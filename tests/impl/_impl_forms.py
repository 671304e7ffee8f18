"""impl's input containers beyond a list of arrays (R-IN-1), as `_impl_api.ImplApi.pack_as`
builds them from NumPy: nested tensors, flat values with `lengths=`, padded values with a mask
(at storage offsets too), tensor subclasses; the nested layouts impl must refuse; float8 rows
viewed from their bytes (NumPy has no float8)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from thd_packing.conformance.targets.impl import tensor


class PlainSubclass(torch.Tensor):
    """A tensor subclass that changes nothing: still an array (R-IN-1)."""


SUBCLASS_FORMS = ("parameters", "subclass")


def subclass_form(form: str, seqs: list[np.ndarray]) -> list[torch.Tensor]:
    """Form "parameters" (`nn.Parameter`, requiring grad where the dtype can) or "subclass"."""
    parts = [torch.from_numpy(s) for s in seqs]
    if form == "parameters":
        return [torch.nn.Parameter(p, requires_grad=p.is_floating_point()) for p in parts]
    return [p.as_subclass(PlainSubclass) for p in parts]


# The mask form at a storage offset (torch.from_numpy always gives 0): views into larger
# buffers, junk around the values and True around the mask, S a multiple of 8 so that impl's
# word scan of the mask (int64 words, an offset in whole words) is considered.
# form -> (mask offset in bytes, values offset in elements, every row one run)
OFFSET_FORMS: dict[str, tuple[int, int, bool]] = {
    "padded-offset-9": (9, 3, True),  # 1 mod 8 and a multiple of 9: no word view possible
    "padded-offset-1": (1, 5, False),  # scattered rows
    "padded-offset-8": (8, 8, True),  # whole words at a non-zero offset: the word scan runs
}


def padded(seqs: list[np.ndarray], s: int, cols: Any) -> tuple[np.ndarray, np.ndarray]:
    """impl's mask form in NumPy (every dtype): `[B, s, *trail]` values, junk bytes off the
    mask, and the bool mask whose row i is True on the columns `cols(i, L_i)`."""
    x = np.empty((len(seqs), s, *seqs[0].shape[1:]), dtype=seqs[0].dtype)
    x.view(np.uint8)[...] = 0xA5
    mask = np.zeros((len(seqs), s), dtype=bool)
    for i, seq in enumerate(seqs):
        mask[i, cols(i, seq.shape[0])] = True
        x[i, cols(i, seq.shape[0])] = seq
    return x, mask


def scattered(i: int, n: int) -> np.ndarray:
    """Every other column, starting at 0 or 1 by row."""
    return np.arange(n) * 2 + (i % 2)


def offset_form(form: str, seqs: list[np.ndarray]) -> tuple[torch.Tensor, dict[str, Any]]:
    """The batch as `[B, S, *trail]` values and a bool mask, views at OFFSET_FORMS' offsets;
    one run per row (at the end, the start or the middle of the row) or every other column."""
    mask_at, values_at, runs = OFFSET_FORMS[form]
    b = len(seqs)
    longest = max(x.shape[0] for x in seqs)
    s = -(-((longest if runs else 2 * longest) + 1) // 8) * 8

    def run(i: int, n: int) -> np.ndarray:
        first = (s - n, 0, (s - n) // 2)[i % 3]
        return np.arange(first, first + n)

    x, mask = padded(seqs, s, run if runs else scattered)
    values = np.empty(values_at + x.size + 8, dtype=x.dtype)
    values.view(np.uint8)[...] = 0xA5
    values[values_at:values_at + x.size] = x.reshape(-1)
    bits = np.ones(mask_at + mask.size + 8, dtype=bool)
    bits[mask_at:mask_at + mask.size] = mask.reshape(-1)
    v = torch.from_numpy(values)[values_at:values_at + x.size].view(x.shape)
    m = torch.from_numpy(bits)[mask_at:mask_at + mask.size].view(b, s)
    assert (m.storage_offset(), v.storage_offset()) == (mask_at, values_at)
    return v, {"mask": m}


# Containers impl must refuse: form -> (the rule, a word its message must contain).
REJECTED_FORMS: dict[str, tuple[str, str]] = {
    "nested-strided": ("R-ERR-1", "layout"),  # torch.strided nested tensors: not a batch form
    "nested-ragged-last": ("R-ERR-9", "jagged"),  # [B, *trail, j]: the length is not dim 1
}


def jagged_offsets(lengths: list[int], device: str | None = None) -> torch.Tensor:
    """`[0, L_0, L_0 + L_1, ...]`: a jagged nested tensor's offsets (int64)."""
    return torch.tensor([0, *np.cumsum(lengths).tolist()], dtype=torch.int64, device=device)


def rejected_form(form: str, seqs: list[np.ndarray]) -> Any:
    """The batch as a container of REJECTED_FORMS."""
    parts = [torch.from_numpy(s) for s in seqs]
    if form == "nested-strided":
        with warnings.catch_warnings():  # the prototype API is the point of this form
            warnings.filterwarnings("ignore", "The PyTorch API of nested tensors", UserWarning)
            return torch.nested.nested_tensor(parts)
    lengths = [p.shape[0] for p in parts]
    values = torch.cat(parts).reshape(sum(lengths), -1)
    return torch.nested.nested_tensor_from_jagged(values, jagged_offsets(lengths)).transpose(1, 2)


def viewed(bits: list[np.ndarray], dtype: str) -> list[torch.Tensor]:
    """The arrays' bytes viewed as torch's dtype `dtype`."""
    return [torch.from_numpy(b).view(getattr(torch, dtype)) for b in bits]


# impl.pack_thd's containers (R-IN-1): a list or tuple, a jagged nested tensor (with gaps in its
# values buffer or not), flat values with lengths=, a padded [B, S, *trail] tensor with a bool
# mask= (one run per row, or scattered; at storage offsets), tensor subclasses.
BATCH_FORMS = ("list", "tuple", "nested", "nested-gaps", "flat-list", "flat-tensor",
               "padded-left", "padded-scattered", *SUBCLASS_FORMS, *OFFSET_FORMS)


def to_form(form: str, seqs: list[np.ndarray]) -> tuple[Any, dict[str, Any]]:
    """The batch as impl's input form `form` (see BATCH_FORMS) plus extra kwargs."""
    if form in SUBCLASS_FORMS:
        return subclass_form(form, seqs), {}
    if form in REJECTED_FORMS:
        return rejected_form(form, seqs), {}
    if form in OFFSET_FORMS:
        return offset_form(form, seqs)
    parts = [tensor(s) for s in seqs]
    if form == "list":
        return parts, {}
    if form == "tuple":
        return tuple(parts), {}
    lengths = [p.shape[0] for p in parts]
    if form in ("padded-left", "padded-scattered"):
        return padded_with_mask(seqs, left=form == "padded-left")
    values = torch.cat(parts, dim=0)
    if form == "flat-list":
        return values, {"lengths": lengths}
    if form == "flat-tensor":
        return values, {"lengths": torch.tensor(lengths, dtype=torch.int32)}
    offsets = jagged_offsets(lengths)
    if form == "nested":
        return torch.nested.nested_tensor_from_jagged(values, offsets), {}
    if form == "nested-gaps":
        # Every sequence followed by two junk rows in the values buffer: the starts come from
        # the offsets, the lengths from lengths(), and the junk must never be read.
        junk = torch.zeros((2, *values.shape[1:]), dtype=values.dtype)
        junk.view(torch.uint8).fill_(0xA5)
        spaced = torch.cat([t for p in parts for t in (p, junk)], dim=0)
        starts = jagged_offsets([n + 2 for n in lengths])
        return torch.nested.nested_tensor_from_jagged(
            spaced, starts, lengths=torch.tensor(lengths, dtype=torch.int64)), {}
    raise ValueError(f"unknown batch form {form!r}")


def padded_with_mask(seqs: list[np.ndarray], left: bool) -> tuple[Any, dict[str, Any]]:
    """impl's mask form, each row left-padded or scattered (S leaves room for both)."""
    s = 2 * max(x.shape[0] for x in seqs) + 1
    x, mask = padded(seqs, s, (lambda i, n: np.arange(s - n, s)) if left else scattered)
    return torch.from_numpy(x), {"mask": torch.from_numpy(mask)}

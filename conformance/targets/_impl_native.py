"""impl's own inputs that NumPy cannot express, for the impl target: tensor subclasses (batch
forms), nested layouts impl refuses (`rejected_forms`), the `meta` device (`valueless_device`)
and torch-only dtypes (`native_dtypes`)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

import impl

from ..protocol import ArraySpec, Config, Meta, plain_meta


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


HOST, VALUELESS = "cpu", "meta"
# Forms impl takes on `meta`: None where the lengths stay on the host (packed by shape), else
# the field whose values live on `meta` (R-DEV-3's ValueError names it).
VALUELESS_FORMS: dict[str, str | None] = {
    "list": None, "tuple": None, "parameters": None, "flat-list": None, "flat-tensor": None,
    "flat-device-lengths": "lengths", "nested": "offsets", "padded-left": "mask",
    "padded-mask-only": "mask",  # the values on the host, only the mask on `meta`
    "nested-lengths-only": "lengths",  # values and offsets on the host, lengths() on `meta`
}


def spec_of(t: torch.Tensor) -> ArraySpec:
    return ArraySpec(tuple(t.shape), str(t.dtype).removeprefix("torch."), t.device.type)


def valueless_batch(form: str, seqs: list[np.ndarray], on: list[bool] | None
                    ) -> tuple[Any, dict[str, Any]]:
    """The batch in `form` with its arrays (`on`: those flagged) moved to `meta`."""
    flags = [True] * len(seqs) if on is None else on
    parts = [torch.from_numpy(s) for s in seqs]
    moved = [p.to(VALUELESS) if f else p for p, f in zip(parts, flags, strict=True)]
    lengths = [p.shape[0] for p in parts]
    if form == "list":
        return moved, {}
    if form == "tuple":
        return tuple(moved), {}
    if form == "parameters":
        return [torch.nn.Parameter(p, requires_grad=False) for p in moved], {}
    if form == "nested-lengths-only":
        return torch.nested.nested_tensor_from_jagged(
            torch.cat(parts), jagged_offsets(lengths),
            lengths=torch.tensor(lengths, device=VALUELESS)), {}
    if form in ("padded-left", "padded-mask-only"):  # the mask on `meta`; the values too, or not
        x = torch.zeros((len(seqs), max(lengths), *parts[0].shape[1:]), dtype=parts[0].dtype,
                        device=VALUELESS if form == "padded-left" else None)
        return x, {"mask": torch.zeros(x.shape[:2], dtype=torch.bool, device=VALUELESS)}
    values = torch.cat(parts).to(VALUELESS)
    if form == "flat-list":
        return values, {"lengths": lengths}
    if form == "flat-tensor":
        return values, {"lengths": torch.tensor(lengths)}
    if form == "flat-device-lengths":
        return values, {"lengths": torch.tensor(lengths, device=VALUELESS)}
    if form == "nested":
        return torch.nested.nested_tensor_from_jagged(
            values, jagged_offsets(lengths, VALUELESS)), {}
    raise ValueError(f"unknown valueless form {form!r}")


def pack_valueless(form: str, seqs: list[np.ndarray], config: Config, cp_rank: int, *,
                   need_roll: bool = False, pad_value: Any = 0, on: list[bool] | None = None
                   ) -> tuple[ArraySpec, ArraySpec, Meta]:
    batch, kwargs = valueless_batch(form, seqs, on)
    rows, pos, plan = impl.pack_thd(batch, impl.PackConfig(**config), cp_rank,
                                    need_roll=need_roll, pad_value=pad_value, **kwargs)
    return spec_of(rows), spec_of(pos), plain_meta(plan)


def unpack_valueless(shards: list[np.ndarray], plan: Any, config: Config, *,
                     on: list[bool] | None = None) -> list[ArraySpec]:
    flags = [True] * len(shards) if on is None else on
    tensors = [torch.from_numpy(np.ascontiguousarray(s)) for s in shards]
    tensors = [t.to(VALUELESS) if f else t for t, f in zip(tensors, flags, strict=True)]
    return [spec_of(t) for t in impl.unpack_thd(tensors, plan, impl.PackConfig(**config))]


# torch dtypes that are none of bool, integer, floating or complex (R-ERR-1): raw bits,
# quantized integers, and a floating type packed two to a byte.
OTHER_DTYPES: dict[str, int] = {  # name -> bytes per element
    name: getattr(torch, name).itemsize
    for name in ("bits8", "bits16", "bits1x8", "bits2x4", "bits4x2", "quint8", "qint8",
                 "qint32", "quint4x2", "quint2x4", "float4_e2m1fn_x2")
    if hasattr(torch, name)}


def viewed(bits: list[np.ndarray], dtype: str) -> list[torch.Tensor]:
    """The arrays' bytes viewed as torch's dtype `dtype`."""
    return [torch.from_numpy(b).view(getattr(torch, dtype)) for b in bits]


def pack_viewed(bits: list[np.ndarray], dtype: str, config: Config, cp_rank: int) -> Any:
    return impl.pack_thd(viewed(bits, dtype), impl.PackConfig(**config), cp_rank)

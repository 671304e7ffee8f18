# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 2.0.0
"""`pack_thd`: one gather per packed tensor through the rank's row map (spec §1, §5-§8, §11).

Inputs (R-IN-1): a list/tuple of tensors `[L_i, *trail]`, a jagged nested tensor (gathered
straight from its values buffer), a flat values tensor `[sum L_i, *trail]` plus `lengths=`, or a
padded batch plus `mask=` (`masked.py`). The plan and the chunk table are built on the host; on
the data's device a fixed sequence of ops, whatever B, builds the position ids and the gather
index in one row-map buffer (`rowmap.positions_and_sources`), gathers once (`index_select`) and
writes the padding rows (`index_fill_`). Extra device memory: at most 8 bytes per output row.
With lengths on the host nothing is copied from the device; lengths on an accelerator are
copied to the host once. No pass over the rows before the gather forks torch's CPU thread pool,
so a pack does not stall on a busy host.
"""

from __future__ import annotations

import array
import contextlib
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .config import PackConfig, as_integer
from .plan import Plan, check_lengths, host_lengths, plan_with_host
from .rowmap import (
    Chunks,
    chunk_table,
    exclusive_cumsum,
    expand,
    index_dtype,
    positions_and_sources,
    second_sums,
)


class Batch:
    """A checked batch: flat values `[N, *trail]` and host (CPU int64) lengths and starts."""

    def __init__(
        self,
        values: torch.Tensor | None,
        lengths: torch.Tensor,
        src_start: torch.Tensor | None,
        parts: Sequence[torch.Tensor] | None,
        trail: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        index: torch.Tensor | None = None,
    ) -> None:
        self.index = index  # mask form (impl/masked.py): concatenated row -> row of `values`
        self.values = values
        self.lengths = lengths
        self.src_start = src_start  # None: the exclusive cumsum of the lengths
        self.parts = parts  # list input (values None): copied once, when rows are gathered
        self.trail = trail
        self.dtype = dtype
        self.device = device


# Reads a tensor subclass's attributes without its __torch_function__ (a few us each for
# nested tensors); a no-op context where torch lacks it.
DIRECT = getattr(torch._C, "DisableTorchFunctionSubclass", contextlib.nullcontext)


def jagged_parts(
    nt: Any, requires_grad: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """`(values, offsets, lengths)` of a jagged nested tensor.

    The public accessors cost a `__torch_function__` round trip each (~20 us for `values()`);
    without autograd the tensors the nested tensor holds are read directly. With autograd the
    public `values()` keeps the gradient path back to the nested tensor.
    """
    if not requires_grad and hasattr(nt, "_values") and hasattr(nt, "_offsets"):
        return nt._values, nt._offsets, getattr(nt, "_lengths", None)
    return nt.values(), nt.offsets(), nt.lengths()


def uniform_sizes(seqs: Sequence[Any]) -> list[int] | None:
    """The first-dimension sizes when every element is a plain (non-nested) tensor of at least
    one dimension with batch[0]'s trailing shape, dtype and device; else None, and the ordered
    checks find the fault.

    Set comprehensions over the metadata cost well under a microsecond per sequence.
    """
    if not seqs or {type(x) for x in seqs} != {torch.Tensor}:
        return None
    if any(x.is_nested for x in seqs):
        return None
    shapes = [x.shape for x in seqs]
    if min(map(len, shapes)) == 0 or len({s[1:] for s in shapes}) != 1:
        return None
    if len({x.dtype for x in seqs}) != 1 or len({x.device for x in seqs}) != 1:
        return None
    return [s[0] for s in shapes]


def check_batch(seqs: Any, lengths: Any = None, mask: Any = None) -> Batch:
    """Check a batch's types and shapes without touching its data (R-ERR-1, R-ERR-7, R-ERR-9)."""
    if mask is not None:  # the padded batch + mask form (impl/masked.py)
        from .masked import check_masked

        return check_masked(seqs, mask, lengths)
    if lengths is not None:
        if not isinstance(seqs, torch.Tensor) or seqs.is_nested:
            raise TypeError(
                "with lengths=, the batch must be one flat (non-nested) tensor [sum L, *trail], "
                f"got {type(seqs).__name__}"
            )
        if seqs.dim() == 0:
            raise ValueError("batch values have zero dimensions; need [sum L, *trail]")
        host = host_lengths(lengths, "lengths")
        check_lengths(host, "lengths")
        total = int(host.sum())
        if total != seqs.shape[0]:
            raise ValueError(f"lengths sum to {total} but the values have {seqs.shape[0]} rows")
        return Batch(seqs, host, None, None, tuple(seqs.shape[1:]), seqs.dtype, seqs.device)
    if isinstance(seqs, torch.Tensor):
        with DIRECT():  # attribute reads without the nested tensor's __torch_function__
            nested = seqs.is_nested
            layout = seqs.layout
            grad = seqs.requires_grad
    else:
        nested = False
    if nested:
        if layout != torch.jagged:
            raise TypeError("nested tensors must use layout=torch.jagged")
        if getattr(seqs, "_ragged_idx", 1) != 1:
            raise ValueError("the jagged dimension of a nested batch must be dim 1")
        values, offsets, seq_lengths = jagged_parts(seqs, grad)
        offsets = host_lengths(offsets, "offsets")  # the one host copy (R-ERR-9 for meta)
        if seq_lengths is None:
            host = torch.diff(offsets)
        else:
            host = host_lengths(seq_lengths, "lengths")
        check_lengths(host)
        return Batch(
            values, host, offsets[:-1], None, tuple(values.shape[1:]), values.dtype, values.device
        )
    if not isinstance(seqs, (list, tuple)):
        raise TypeError(
            "batch must be a list or tuple of tensors, a jagged nested tensor, or a flat tensor "
            f"with lengths=; got {type(seqs).__name__}"
        )
    sizes = uniform_sizes(seqs)
    if sizes is not None:
        host = torch.frombuffer(array.array("q", sizes), dtype=torch.int64)
        check_lengths(host)
        first = seqs[0]
        return Batch(None, host, None, seqs, tuple(first.shape[1:]), first.dtype, first.device)
    # Something is wrong: find it, one kind of fault at a time, in a fixed order.
    for k, x in enumerate(seqs):
        if not isinstance(x, torch.Tensor) or x.is_nested:
            raise TypeError(f"batch[{k}] must be a torch.Tensor, got {type(x).__name__}")
    if len(seqs) == 0:
        raise ValueError("empty batch: B = 0")
    first = seqs[0]
    for k, x in enumerate(seqs):
        if x.dim() == 0:
            raise ValueError(f"batch[{k}] has zero dimensions; need [L, *trail]")
    trail = tuple(first.shape[1:])
    for k, x in enumerate(seqs):
        if tuple(x.shape[1:]) != trail:
            raise ValueError(
                f"batch[{k}] has trailing shape {tuple(x.shape[1:])}, batch[0] has {trail}"
            )
    for k, x in enumerate(seqs):
        if x.dtype != first.dtype:
            raise TypeError(f"batch[{k}] has dtype {x.dtype}, batch[0] has {first.dtype}")
    for k, x in enumerate(seqs):
        if x.device != first.device:
            raise ValueError(f"batch[{k}] is on {x.device}, batch[0] is on {first.device}")
    host = torch.tensor([x.shape[0] for x in seqs], dtype=torch.int64)
    check_lengths(host)
    return Batch(None, host, None, seqs, trail, first.dtype, first.device)


_INT_DTYPES = tuple(
    getattr(torch, name)
    for name in ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64")
    if hasattr(torch, name)
)
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def dtype_kind(dtype: torch.dtype) -> str:
    """Spec dtype family: "b", "i", "f", "c"; anything else is a TypeError (R-ERR-1)."""
    if dtype == torch.bool:
        return "b"
    if dtype in _INT_DTYPES:
        return "i"
    if dtype.is_complex:
        return "c"
    if dtype.is_floating_point and "_x" not in str(dtype):  # packed sub-byte types excluded
        return "f"
    raise TypeError(f"unsupported dtype {dtype} (need bool, integer, floating or complex)")


def bits_view(dtype: torch.dtype) -> torch.dtype | None:
    """Same-width signed int to move a dtype's data through, for dtypes whose kernels lack
    `index_select`/`masked_fill_` on some paths (wide unsigned ints, float8); else None."""
    native = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
    if dtype in native or dtype.is_complex:
        return None
    if dtype in _INT_DTYPES or (dtype.is_floating_point and dtype.itemsize == 1):
        return _BITS[dtype.itemsize]
    return None


class Fill:
    """How to write `pad_value` into rows of a dtype: `masked_fill_` on `rows.view(view)`.

    `view` is None for dtypes whose kernels support `masked_fill_`; for the rest (wide unsigned
    ints, float8) the rows are viewed as a signed int of the same width and filled with the pad
    value's bit pattern, so every dtype takes the same path.
    """

    def __init__(self, value: Any, view: torch.dtype | None) -> None:
        self.value = value
        self.view = view


# Floating dtypes without infinities (R-IN-5): casting inf to them saturates or gives NaN.
NO_INFINITY = frozenset(
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
    if hasattr(torch, name)
)


def check_pad_value(pad_value: Any, dtype: torch.dtype, name: str = "pad_value") -> Fill:
    """R-IN-5, R-ERR-10 (R-ERR-1 for the dtype): check `pad_value` against the dtype's range;
    R-ERR-16 for `ignore_index` (`name`), the value labels="ignore" writes."""
    kind = dtype_kind(dtype)
    value: Any = pad_value
    if kind == "b":
        if pad_value != 0 and pad_value != 1:
            raise ValueError(f"{name}={pad_value!r} is not representable in dtype {dtype}")
        value = bool(pad_value)
    elif kind == "i":
        if isinstance(pad_value, float) and not (
            math.isfinite(pad_value) and pad_value == int(pad_value)
        ):
            raise ValueError(f"{name}={pad_value!r} is not an integer for dtype {dtype}")
        info = torch.iinfo(dtype)
        value = int(pad_value)
        if not info.min <= value <= info.max:
            raise ValueError(
                f"{name}={pad_value!r} is outside dtype {dtype} range [{info.min}, {info.max}]"
            )
    else:
        limit = torch.finfo(dtype).max
        finite = not isinstance(pad_value, float) or math.isfinite(pad_value)
        if isinstance(pad_value, float) and math.isinf(pad_value) and dtype in NO_INFINITY:
            raise ValueError(f"{name}={pad_value!r}: dtype {dtype} has no infinity")
        if finite and abs(pad_value) > limit:  # exact for ints of any size
            raise ValueError(
                f"{name}={pad_value!r} overflows dtype {dtype} (largest finite {limit})"
            )
        value = float(pad_value)
    bits = bits_view(dtype)
    if bits is None:
        return Fill(value, None)
    if kind == "i":
        width = 8 * dtype.itemsize
        pattern = value - (1 << width) if value >= 1 << (width - 1) else value
    else:
        pattern = int(torch.tensor(value, dtype=dtype).view(bits).item())
    return Fill(pattern, bits)


def check_call_args(config: Any, cp_rank: Any, need_roll: Any, pad_value: Any) -> int:
    """Per-call argument checks (R-IN-4, R-ERR-1, R-ERR-5); returns `cp_rank` as an int."""
    if not isinstance(config, PackConfig):
        raise TypeError(f"config must be a PackConfig, got {type(config).__name__}")
    rank = as_integer("cp_rank", cp_rank)
    if not isinstance(need_roll, bool):
        raise TypeError(f"need_roll must be a bool, got need_roll={need_roll!r}")
    if not isinstance(pad_value, (bool, int, float)):
        raise TypeError(f"pad_value must be a bool, int or float, got pad_value={pad_value!r}")
    if not 0 <= rank < config.cp_size:
        raise ValueError(f"cp_rank must be in [0, {config.cp_size}), got cp_rank={rank}")
    return rank


def pack_batch(
    batch: Batch,
    plan: Plan,
    config: PackConfig,
    rank: int,
    need_roll: bool,
    fill: Fill,
    host: tuple[torch.Tensor, torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather rank `rank`'s rows and position ids from a checked batch (R-ROW-*, R-POS-*).

    `host` is the plan's padded lengths and padded offsets as CPU int64 (`plan_with_host`),
    one entry per segment: K >= B, the batch's B lengths are extended with zero-length ones.
    """
    rows_n = plan.local_rows
    lengths, src_start = batch.lengths, batch.src_start
    if src_start is None:
        src_start = plan.cu_seqlens[:-1].to(torch.int64)
    extra = host[0].numel() - lengths.numel()
    if extra:  # segments past B (R-TAIL-1, R-STATIC-1): no real rows, any source in range
        lengths = F.pad(lengths, (0, extra))
        if src_start.numel() < host[0].numel():
            src_start = F.pad(src_start, (0, extra))
    ch = chunk_table(
        lengths,
        host[0],
        host[1],
        src_start,
        config.cp_size,
        config.cp_layout,
        rank,
        rows_n,
        1 if need_roll else 0,
    )
    if need_roll and config.labels == "ignore":
        # R-LABEL-1: the labels line up with the inputs, so do their position ids (R-POS-2);
        # the index (row + d[1]) still reads the next token.
        ch.d[0] -= 1
    device = batch.device
    real_through = torch.cumsum(ch.real, 0)  # real rows up to and including each chunk
    n_real = int(real_through[-1])
    if n_real == 0:
        # Nothing real on this rank: every row is padding (R-ROW-2); R-POS-2 for the ids.
        pos = expand(rows_n, ch.starts, ch.d[0], slope=1, dtype=torch.int64, device=device)
        rows = torch.full(
            (rows_n, *batch.trail), fill.value, dtype=fill.view or batch.dtype, device=device
        )
        return as_dtype(rows, batch.dtype), pos
    values = batch.values
    if values is None:  # a list: copied once into one buffer
        assert batch.parts is not None
        values = torch.cat(list(batch.parts), dim=0)
    n_src = values.shape[0] if batch.index is None else batch.index.numel()
    # R-POS-2, R-ROLL-1: position id = offset (+1 with need_roll) of the row's source; and the
    # row's index in the source, which runs past a sequence's real rows on its padding rows.
    # With autograd the gather's backward keeps its index: the int32 index on its own then.
    grad = values.requires_grad and torch.is_grad_enabled()
    pos, spare = positions_and_sources(ch, n_src, rows_n, device, index=not grad)
    if spare is not None:  # int64 [rows + 2]: reused for the padding rows after the gather
        idx = spare[:rows_n]
    else:  # a padding run longer than the source, or autograd: the index on its own
        index = index_dtype(2 * n_src, 2 * (plan.total + rows_n) + 4)
        idx = gather_index(ch, n_src, rows_n, index, device)
    if batch.index is not None:  # mask form: gather from the padded batch in place
        idx = batch.index.index_select(0, idx)
    rows = as_dtype(values, fill.view).index_select(0, idx)  # R-ROW-1: real rows bit for bit
    count = rows_n - n_real
    if spare is not None or count * 8 <= rows_n * (8 - idx.element_size()):
        where = padding_rows(ch, real_through, count, device, spare)
        rows.index_fill_(0, where, fill.value)  # R-ROW-2
    else:
        mask = padding_mask(ch, rows_n, device)
        rows.masked_fill_(mask.view(rows_n, *([1] * len(batch.trail))), fill.value)  # R-ROW-2
    return as_dtype(rows, batch.dtype), pos


def as_dtype(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """`t` viewed as `dtype` (same width); unchanged for None or its own dtype."""
    return t if dtype is None or dtype == t.dtype else t.view(dtype)


def gather_index(
    ch: Chunks, n_src: int, rows_n: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """The gather index: on chunk `m`'s real rows the source row `row + d[1, m]`; on its padding
    rows (overwritten with `pad_value` afterwards) one constant source row inside the buffer.

    The constant is the source row after the chunk's last real row, or the buffer's last row
    where that is past the end (the last sequence's padding), so the index never leaves the
    buffer and needs no clamp, an element-wise pass (`second_sums`). Chunk `m`'s real piece
    changes the function by `row + d[1, m] - after[m-1]` (slope 1), its padding piece by
    `after[m] - (row + d[1, m])` (slope -1).
    """
    src = ch.d[1]
    pad_start = ch.starts + ch.real
    natural = pad_start + src  # where the chunk's source rows run on to
    after = natural.clamp(max=n_src - 1)
    jump = ch.starts + src - F.pad(after, (1, -1))  # from the previous padding value (0 at first)
    cut = after - natural
    at = torch.stack((ch.starts, ch.starts + 1, pad_start, pad_start + 1))
    z = torch.stack((jump, 1 - jump, cut, -1 - cut))
    return second_sums(rows_n, at.view(-1), z.view(-1), dtype, device)


def padding_rows(
    ch: Chunks,
    real_through: torch.Tensor,
    count: int,
    device: torch.device,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The `count` padding rows as an int64 index (taken while that index and the gather index
    stay within 8 bytes per output row; otherwise `padding_mask`), written into `out` when the
    caller hands over a buffer it no longer needs (the spent row-map buffer of
    `positions_and_sources`, rows + 2 int64), else into a fresh one.

    Filling only the padding rows (`index_fill_`) instead of masking the whole output
    (`masked_fill_`) saves a full pass over the rows. Chunk `m`'s padding rows follow its real
    rows, so its `k`-th, counted among all padding rows, is local row `k` plus the real rows up
    to and including chunk `m`: a ramp over the padding rows.
    """
    return expand(
        count,
        exclusive_cumsum(ch.pad),
        real_through,
        slope=1,
        dtype=torch.int64,
        device=device,
        out=out,
    )


def padding_mask(ch: Chunks, rows_n: int, device: torch.device) -> torch.Tensor:
    """A bool `[rows_n]` mask of the padding rows: a step ramp, 0 on real runs, 1 on padding."""
    starts = torch.stack((ch.starts, ch.starts + ch.real), dim=1).view(-1)
    flags = torch.tensor([0, 1]).repeat(ch.starts.numel())
    return expand(rows_n, starts, flags, slope=0, dtype=torch.int8, device=device).view(torch.bool)


def pack_thd(
    seqs: Any,
    config: PackConfig,
    cp_rank: int,
    *,
    need_roll: bool = False,
    pad_value: bool | int | float = 0,
    lengths: Any = None,
    mask: Any = None,
) -> tuple[torch.Tensor, torch.Tensor, Plan]:
    """Pack a batch into rank `cp_rank`'s THD rows (spec §5-§8).

    Returns `(rows [local_rows, *trail], position_ids [local_rows] int64, plan)`, on the
    input's device and dtype. With `need_roll` the rows are next-token labels: under
    `config.labels="ignore"` with `config.ignore_index` where no next token exists and the
    inputs' position ids (R-LABEL-1); `loss_mask` gives the matching mask. `seqs` is a
    list/tuple of tensors, a jagged nested tensor, or a flat `[sum L, *trail]` tensor together
    with `lengths=` (a list or 1-D tensor), or a padded `[B, S, *trail]` tensor with a bool
    `mask=` `[B, S]` (sequence i is `x[i, mask[i]]`). Every check (R-ERR-*) runs before any
    data is read.
    """
    rank = check_call_args(config, cp_rank, need_roll, pad_value)
    batch = check_batch(seqs, lengths, mask)
    fill = check_pad_value(pad_value, batch.dtype)
    if need_roll and config.labels == "ignore":
        # R-LABEL-1: ignore_index on each last real token and every padding row: the rows the
        # roll writes as padding (R-ERR-16 when the dtype cannot hold it).
        fill = check_pad_value(config.ignore_index, batch.dtype, "ignore_index")
    plan, padded, cu_padded = plan_with_host(batch.lengths, config)
    rows, pos = pack_batch(batch, plan, config, rank, need_roll, fill, (padded, cu_padded))
    return rows, pos, plan

"""Pack: rows, position ids and next-token labels through the row map (spec §6-§8)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .config import PackConfig
from .labels import input_position_ids
from .plan import Plan, plan_thd
from .rowmap import row_map
from .validation import as_bool, as_cp_rank, check_pad_value


def check_batch(seqs: Any) -> tuple[tuple[int, ...], np.dtype]:
    """R-IN-1, R-ERR-1, R-ERR-7, R-ERR-9: returns the common trailing shape and dtype."""
    if not isinstance(seqs, list | tuple):
        raise TypeError(f"seqs must be a list or tuple of arrays, got {type(seqs).__name__}")
    if len(seqs) == 0:
        raise ValueError("the batch is empty: seqs has no sequence (B must be >= 1)")
    for index, seq in enumerate(seqs):
        if not isinstance(seq, np.ndarray):
            raise TypeError(f"seqs[{index}] must be a numpy array, got {type(seq).__name__}")
        if seq.ndim == 0:
            raise ValueError(f"seqs[{index}] must have at least one dimension, got shape ()")
    trail = seqs[0].shape[1:]
    dtype = seqs[0].dtype
    for index, seq in enumerate(seqs):
        if seq.shape[1:] != trail:
            raise ValueError(
                f"seqs[{index}] has trailing shape {seq.shape[1:]}, expected {trail} (as seqs[0])"
            )
        if seq.dtype != dtype:
            raise TypeError(f"seqs[{index}] has dtype {seq.dtype}, expected {dtype} (as seqs[0])")
    return trail, dtype


def pad_limit(dtype: np.dtype) -> tuple[int, int] | float | None:
    """The representable range that R-IN-5 checks `pad_value` against."""
    if dtype.kind in ("i", "u"):
        info = np.iinfo(dtype)
        return (int(info.min), int(info.max))
    if dtype.kind in ("f", "c"):
        return float(np.finfo(dtype).max)
    return None


def pack_thd(
    seqs: Any,
    config: PackConfig,
    cp_rank: Any,
    *,
    need_roll: Any = False,
    pad_value: Any = 0,
) -> tuple[np.ndarray, np.ndarray, Plan]:
    """Rank `cp_rank`'s rows and position ids (R-ROW-*, R-POS-*, R-ROLL-*, R-LABEL-1).

    Through the row map, sequence i's tokens fill segment i in order (R-CONSUMER-7), with their
    offsets as position ids (R-CONSUMER-10) or their own next token as label (R-CONSUMER-11),
    and every padding row holds pad_value (ignore_index for labels="ignore"), never another
    sequence's token (R-CONSUMER-12, R-CONSUMER-15). No position id is negative (R-POS-4), so
    position ids alone recover the sequences (R-PID-2). Position ids are int64 and the plan's
    arrays int32 (R-CONSUMER-16); a valid input always gives all three (R-CONSUMER-17).

    `cp_rank`, `need_roll` and `pad_value` are the per-call arguments of R-IN-4. The rows are
    new arrays; `seqs` is only read (R-IN-6).
    """
    # Every check before any data is read (§11).
    if not isinstance(config, PackConfig):
        raise TypeError(f"config must be a PackConfig, got {type(config).__name__}")
    _, dtype = check_batch(seqs)
    rank = as_cp_rank(cp_rank, config.cp_size)
    roll = as_bool("need_roll", need_roll)
    if dtype.kind not in ("b", "i", "u", "f", "c"):
        raise TypeError(f"unsupported dtype {dtype} (need bool, integer, floating or complex)")
    check_pad_value(pad_value, dtype.kind, pad_limit(dtype))
    ignore = roll and config.labels == "ignore"
    if ignore:  # R-LABEL-2, R-ERR-16: the labels' dtype must hold ignore_index
        check_pad_value(config.ignore_index, dtype.kind, pad_limit(dtype), "ignore_index")
    plan = plan_thd([seq.shape[0] for seq in seqs], config)
    rows, position_ids = lay_out(seqs, plan, config, rank, need_roll=roll, pad_value=pad_value)
    return rows, position_ids, plan


def lay_out(
    seqs: Any, plan: Plan, config: PackConfig, cp_rank: int, *, need_roll: bool, pad_value: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Rank `cp_rank`'s rows and position ids of `plan`, read off its row map (§6-§8).

    `pack_thd` calls it on its own plan once every input is checked. The conformance suite
    also calls it on the plan a target reports, to judge that target's rows on it.
    """
    trail, dtype = seqs[0].shape[1:], seqs[0].dtype
    input_ids = input_position_ids(config, need_roll)
    ignore = need_roll and config.labels == "ignore"
    rows = np.empty((plan.local_rows, *trail), dtype=dtype)
    position_ids = np.zeros(plan.local_rows, dtype=np.int64)  # R-POS-1
    for k, source in enumerate(row_map(plan, config, cp_rank)):
        length = int(plan.seqlens[source.seq])
        # Position ids.
        if source.real and input_ids:
            position_ids[k] = source.offset  # R-POS-2 (R-LABEL-1: also for ignore's labels)
        elif source.real and source.offset < length - 1:
            position_ids[k] = source.offset + 1  # R-ROLL-1
        elif not source.real and input_ids and padding_segment_position(plan, config, source.seq):
            position_ids[k] = source.offset  # R-TAIL-2, R-TAIL-4: restart at 0 per segment
        else:
            position_ids[k] = 0  # R-POS-3, R-ROLL-2: unspecified; never negative (R-POS-4)
        # Values.
        if not need_roll and source.real:
            rows[k] = seqs[source.seq][source.offset]  # R-ROW-1
        elif not need_roll:
            rows[k] = pad_value  # R-ROW-2
        elif source.real and source.offset < length - 1:
            rows[k] = seqs[source.seq][source.offset + 1]  # R-ROLL-1, R-LABEL-1
        elif ignore:
            rows[k] = config.ignore_index  # R-LABEL-1: last real token and every padding row
        else:
            rows[k] = pad_value  # R-ROLL-3 (padding), R-ROLL-2 (last real: unspecified)
    return rows, position_ids


def padding_segment_position(plan: Plan, config: PackConfig, seq: int) -> bool:
    """R-TAIL-2, R-TAIL-4: the rows of the padding segments (tail="segment" or "tokens",
    segment index >= B) have their offsets as position ids (0 for each row under "tokens"),
    when position ids are the inputs' (`labels.input_position_ids`)."""
    return config.tail in ("segment", "tokens") and seq >= plan.num_seqs


def specified_slots(
    plan: Plan, config: PackConfig, cp_rank: int, need_roll: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Which rows and position ids are specified (R-POS-3, R-ROLL-2, R-TAIL-2, R-TAIL-4,
    R-LABEL-1); compare only these."""
    sources = row_map(plan, config, cp_rank)
    rows_specified = np.ones(len(sources), dtype=bool)
    pos_specified = np.ones(len(sources), dtype=bool)
    input_ids = input_position_ids(config, need_roll)
    for k, source in enumerate(sources):
        last_real = source.offset == int(plan.seqlens[source.seq]) - 1
        if not source.real and input_ids and padding_segment_position(plan, config, source.seq):
            pass  # R-TAIL-2, R-TAIL-4: the padding segments' position ids are their offsets
        elif not source.real:
            pos_specified[k] = False  # R-POS-3
        elif need_roll and last_real and config.labels == "ignore":
            pass  # R-LABEL-1: ignore_index, position id L - 1
        elif need_roll and last_real:
            rows_specified[k] = False  # R-ROLL-2
            pos_specified[k] = False  # R-ROLL-2
    return rows_specified, pos_specified

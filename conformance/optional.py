"""The optional methods of the adapter protocol, found by presence (protocol.METHODS maps each
group to the capability name the tests use); a target without one gets its tests "declined".
Pack-like methods return `Packed`, as `pack` does. Everywhere: convert `np.ndarray` arguments
to your array type without copying where you can, and pass any other object through
unchanged, so that the rejection tests reach your validation.

Nothing imports this module at run time: it is the reference for adapter authors.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .protocol import ArraySpec, Config, Meta, Packed

Sequences = list[np.ndarray]
Gathered = tuple[list[np.ndarray], np.ndarray | None]  # the B sequences, the local gradient
MegatronView = tuple[np.ndarray, dict[str, Any], np.ndarray]  # rows[None], params, pos[None]


class OptionalMethods(Protocol):
    # -- plan, unpack, engine flags, row map, other containers ---------------------------------
    batch_forms: tuple[str, ...]  # the input containers `pack_as` builds (names of your choice)
    rejected_forms: dict[str, tuple[str, str]]  # containers to refuse: form -> (rule, word)

    def plan(self, seqlens: Any, config: Config) -> Meta:
        """The metadata for a list of lengths, without data (spec section 4)."""

    def unpack(self, shards: Sequences, meta: Meta, config: Config) -> Sequences:
        """Every rank's rows in rank order -> the B sequences (R-UNPACK-1); build your plan from
        `meta`, which the suite may tamper with (R-ERR-11)."""

    def resolve_engine_config(self, **flags: Any) -> Config:
        """Engine flags -> config keyword arguments (spec section 10)."""

    def row_map(self, meta: Meta, config: Config,
                cp_rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rank `cp_rank`'s row map without data: source sequence, offset in the padded
        sequence, real or not (`reference.RowSource`'s fields), `local_rows` entries each."""

    def pack_as(self, form: str, seqs: Sequences, config: Config, cp_rank: int, *,
                need_roll: bool = False, pad_value: Any = 0) -> Packed:
        """`pack` with `seqs` first built as the container `form` (of `batch_forms`, which must
        give the reference's result, or of `rejected_forms`, which must raise the rule's class
        with a message naming the word)."""

    # -- inputs the plain protocol cannot express ----------------------------------------------
    def pack_masked(self, values: Any, mask: Any, config: Config, cp_rank: int, *,
                    need_roll: bool = False, pad_value: Any = 0) -> Packed:
        """The padded batch `values [B, S, *trail]`, sequence i = `values[i][mask[i]]`; arrays
        keep their strides (R-IN-7)."""

    def pack_flat(self, values: np.ndarray, lengths: Any, config: Config,
                  cp_rank: int) -> Packed:
        """Flat values `[sum L, *trail]` with `lengths=` as given (an ndarray of any shape and
        dtype becomes your 1-D array type); bad lengths must reach your validation."""

    def pack_float8(self, bits: Sequences, dtype: str, config: Config, cp_rank: int, *,
                    pad_value: Any = 0) -> Packed:
        """`pack` of uint8 arrays viewed as your float8 dtype `dtype`; rows back as uint8."""

    def plan_as_is(self, seqlens: Any, config: Any) -> Any:
        """`plan` with `config` handed over unchanged (a dict, None: TypeError naming it)."""

    def pack_as_is(self, seqs: Sequences, config: Any, cp_rank: int) -> Any:
        """`pack` with `config` handed over unchanged."""

    def unpack_as_is(self, shards: Sequences, meta: Meta, config: Config, *, plan: Any = None,
                     config_obj: Any = None) -> Any:
        """`unpack` with a non-None `plan` / `config_obj` handed over in place of yours."""

    def native_scalar(self, value: bool | int | float) -> Any:
        """Your 0-d array holding `value` (torch: `torch.tensor(value)`), used as a size or
        cp_rank: accepted as an int, TypeError as a bool or float (spec section 0)."""

    other_dtypes: dict[str, int]  # your dtypes that are no number type -> bytes per element

    def pack_viewed(self, bits: Sequences, dtype: str, config: Config, cp_rank: int) -> Any:
        """`pack` of unsigned-int arrays viewed as your dtype `dtype`: TypeError (R-ERR-1)."""

    # -- a device that holds no values (R-DEV-1..3; torch: `meta`) ------------------------------
    devices: tuple[str, str]  # (host, valueless) in your names
    valueless_forms: dict[str, str | None]  # form -> None (lengths on the host), else the field
    # whose values live on the valueless device (rejected with ValueError naming it, R-DEV-3)

    def pack_valueless(self, form: str, seqs: Sequences, config: Config, cp_rank: int, *,
                       need_roll: bool = False, pad_value: Any = 0,
                       on: list[bool] | None = None) -> tuple[ArraySpec, ArraySpec, Meta]:
        """`pack_as(form, ...)` with the batch on the valueless device (`on`, form "list": per
        sequence, False keeps it on the host); rows and position ids as ArraySpecs."""

    def unpack_valueless(self, shards: Sequences, meta: Meta, config: Config, *,
                         on: list[bool] | None = None) -> list[ArraySpec]:
        """`unpack` with shard r on the valueless device where `on[r]` (None: all)."""

    def megatron_postprocess_valueless(self, output: np.ndarray, meta: Meta,
                                       config: Config) -> list[ArraySpec]:
        """`megatron_postprocess` of an output moved to the valueless device (R-MEG-3)."""

    # -- a Megatron adapter (spec section 12) ---------------------------------------------------
    def megatron_preprocess(self, seqs: Sequences, config: Config, cp_rank: int, *,
                            need_roll: bool = False) -> MegatronView:
        """`rows[None]`, the PackedSeqParams fields as a dict, `position_ids[None]` (R-MEG-1)."""

    def megatron_preprocess_kwargs(self, seqs: Sequences, config: Config, cp_rank: int, *,
                                   need_roll: bool = False) -> MegatronView:
        """Preprocess with a PackedSeqParams whose constructor takes `**kwargs` (verl's test
        stub): every field passed (R-MEG-4), verl's slot values (R-MEG-6, R-MEG-7)."""

    def megatron_preprocess_with_params(self, seqs: Sequences, config: Config, cp_rank: int,
                                        params_cls: Any) -> MegatronView:
        """Preprocess with `params_cls` (say, an older PackedSeqParams) in megatron-core's
        place (R-MEG-4)."""

    def megatron_preprocess_as_is(self, input_ids: Any, config: Config, cp_rank: int,
                                  **adapter: Any) -> Any:
        """Preprocess of `input_ids` as given (TypeError for a non-batch); `adapter` holds the
        adapter's own keywords in verl's names (`cp_layout`, `local_cp_size`)."""

    def megatron_postprocess(self, output: np.ndarray, meta: Meta, config: Config, *,
                             params: dict[str, np.ndarray] | None = None,
                             **adapter: Any) -> Sequences:
        """Postprocess on one process (cp_size 1) of `output` as given, the PackedSeqParams
        built from `meta` with the fields in `params` replaced; the B sequences."""

    def megatron_preprocess_newer(self, seqs: Sequences, config: Config, cp_rank: int, *,
                                  dynamic: bool = False) -> MegatronView:
        """Preprocess under a simulated newer megatron-core (`cp_partition_mode`; `dynamic`:
        the CP size as `local_cp_size`, the dict adding `dynamic_group_ok`)."""

    def gathered_unpack(self, shards: Sequences, meta: Meta, config: Config,
                        cp_rank: int) -> Gathered:
        """The distributed unpack of rank `cp_rank`, its all_gather answered in process with
        `shards`; fails if it gathers over another group than the CP group given (R-MEG-3)."""

    def gathered_unpack_dynamic(self, shards: Sequences, meta: Meta, config: Config,
                                cp_rank: int) -> Gathered:
        """`gathered_unpack` with `local_cp_size` and the group in `PackedSeqParams.cp_group`."""

    def distributed_unpack(self, rows: np.ndarray, meta: Meta, config: Config, cp_rank: int,
                           group: Any) -> Gathered:
        """Gather `rows` over a live torch.distributed group and unpack (R-MEG-3)."""

    # -- verl's padded batch + attention mask entry points (R-MEG-8, R-MEG-9) --------------------
    def packed_preprocess(self, values: np.ndarray, mask: np.ndarray, config: Config,
                          cp_rank: int) -> tuple[np.ndarray, dict[str, Any]]:
        """`preprocess_packed_seqs`: rows `[1, R, *trail]` and the PackedSeqParams view."""

    def packed_gathered(self, shards: Sequences, cu_padded: np.ndarray, mask: np.ndarray,
                        config: Config, cp_rank: int) -> tuple[np.ndarray, np.ndarray | None]:
        """`postprocess_packed_seqs`, its collective answered in process: `[B, S, *trail]`."""

    def packed_distributed(self, rows: np.ndarray, cu_padded: np.ndarray, mask: np.ndarray,
                           config: Config, cp_rank: int,
                           group: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """`postprocess_packed_seqs` over a live group."""

    def packed_postprocess(self, output: np.ndarray, cu_padded: np.ndarray, mask: Any,
                           config: Config, *, params: dict[str, Any] | None = None,
                           **adapter: Any) -> np.ndarray:
        """`postprocess_packed_seqs` on one process, `output` and `mask` as given, fields in
        `params` replaced (arrays keep their dtype and shape); `adapter`: batch_size, seq_len."""

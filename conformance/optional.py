"""The optional methods of the adapter protocol, found by presence (protocol.METHODS maps each
to the capability name the tests use). A target that has a method gets its tests; one that has
not gets them "declined". Pack-like methods return `Packed`, as `pack` does.

Nothing imports these classes at run time: they are the reference for adapter authors.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .protocol import ArraySpec, Config, Meta, Packed


class OptionalMethods(Protocol):
    """The general optional methods."""

    batch_forms: tuple[str, ...]

    def pack_as(
        self, form: str, seqs: list[np.ndarray], config: Config, cp_rank: int, *,
        need_roll: bool = False, pad_value: Any = 0,
    ) -> Packed:
        """Capability `batch_forms`: like `pack`, with `seqs` first converted to the input form
        `form` (one of `batch_forms`, names of the target's choosing: a nested tensor, a flat
        buffer with lengths, ...). Each form must give the reference's result."""
        ...

    def row_map(
        self, meta: Meta, config: Config, cp_rank: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Capability `row_map`: rank `cp_rank`'s row map for the plan `meta` as three arrays of
        `local_rows` entries: source sequence, offset in the padded sequence, and whether the
        row is a real token (the fields of `reference.RowSource`)."""
        ...

    def plan(self, seqlens: Any, config: Config) -> Meta:
        """Capability `plan`: the metadata for a list of lengths (spec section 4)."""
        ...

    def unpack(self, shards: list[np.ndarray], meta: Meta, config: Config) -> list[np.ndarray]:
        """Capability `unpack`: every rank's rows in rank order -> the B sequences (R-UNPACK-1).

        Build your implementation's plan from `meta` (the suite may pass a tampered one, R-ERR-11).
        Convert the elements that are `np.ndarray`s; pass any other element (and a `shards` that
        is not a list) through unchanged, so that rejection tests reach your validation.
        """
        ...

    def resolve_engine_config(self, **flags: Any) -> Config:
        """Capability `engine`: engine flags -> config keyword arguments (spec section 10)."""
        ...

    def megatron_preprocess(
        self, seqs: list[np.ndarray], config: Config, cp_rank: int, *, need_roll: bool = False
    ) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
        """Capability `megatron`: `rows[None]`, the PackedSeqParams fields as a dict, and
        `position_ids[None]` (R-MEG-1)."""
        ...

    def megatron_preprocess_newer(
        self, seqs: list[np.ndarray], config: Config, cp_rank: int, *, dynamic: bool = False
    ) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
        """Capability `simulated_megatron`: `megatron_preprocess` with a PackedSeqParams that has
        `cp_partition_mode`, and with `dynamic` the CP size given as `local_cp_size` (the
        parallel state then says cp_size 1); the dict adds `dynamic_group_ok`: the params carry
        `local_cp_size` and the group `get_dynamic_data_context_parallel_groups` returned."""
        ...

    def gathered_unpack_dynamic(
        self, shards: list[np.ndarray], meta: Meta, config: Config, cp_rank: int
    ) -> tuple[list[np.ndarray], np.ndarray | None]:
        """Capability `simulated_megatron`: `gathered_unpack` with `local_cp_size` = len(shards)
        and the group in `PackedSeqParams.cp_group`; the parallel state says cp_size 1."""
        ...

    def gathered_unpack(
        self, shards: list[np.ndarray], meta: Meta, config: Config, cp_rank: int
    ) -> tuple[list[np.ndarray], np.ndarray | None]:
        """Capability `local_gather`: like `distributed_unpack` for rank `cp_rank`, but the
        all_gather is answered in process with `shards` (every rank's rows, rank order). Returns
        the B sequences and the gradient of their sum on the local rows (None if not float)."""
        ...

    def distributed_unpack(
        self, rows: np.ndarray, meta: Meta, config: Config, cp_rank: int, group: Any
    ) -> tuple[list[np.ndarray], np.ndarray | None]:
        """Capability `distributed`: gather `rows` over the live `torch.distributed` group and
        unpack. Returns the B sequences and, where the result is differentiable, the gradient of
        the sum of all outputs with respect to the local rows (R-MEG-3), else None."""
        ...


class FlatBatchMethods(Protocol):
    """Capability `flat_batch_checks`."""

    def pack_flat(
        self, values: np.ndarray, lengths: Any, config: Config, cp_rank: int
    ) -> Packed:
        """Pack the flat values `[sum L, *trail]` split by `lengths` (rank `cp_rank`).

        Convert `values` without copying (the suite checks that a rejection leaves it
        unchanged). A `lengths` that is a `np.ndarray` becomes your 1-D array type (any shape and
        dtype, as given, without copying); any other object (a list, a string, None) is passed
        through unchanged. The suite feeds lengths that do not sum to the rows, negative or
        non-integer lengths, 2-D lengths: your validation must see them.
        """
        ...


class MaskFormMethods(Protocol):
    """Capability `mask_form` (R-IN-7)."""

    def pack_masked(
        self, values: Any, mask: Any, config: Config, cp_rank: int, *,
        need_roll: bool = False, pad_value: Any = 0,
    ) -> Packed:
        """Pack the padded batch `values [B, S, *trail]` whose sequence i is
        `values[i][mask[i]]`. Convert a `values` or `mask` that is a `np.ndarray` to your array
        type without copying and keeping its strides (the suite passes column-major and strided
        masks, any dtype and shape); pass anything else through unchanged."""
        ...


class MegatronCheckMethods(Protocol):
    """Capability `megatron_checks`: the adapter's own validation (spec section 12)."""

    def megatron_preprocess_as_is(self, input_ids: Any, config: Config, cp_rank: int,
                                  **adapter: Any) -> Any:
        """preprocess_thd_engine with `input_ids` exactly as given (a list, an ndarray, None):
        the suite expects TypeError for anything that is not the adapter's batch type. Keyword
        arguments in `adapter` (verl's names: `cp_layout`, `local_cp_size`) go to the adapter
        unchanged."""
        ...

    def megatron_preprocess_with_params(
        self, seqs: list[np.ndarray], config: Config, cp_rank: int, params_cls: Any
    ) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
        """`megatron_preprocess` with `params_cls` (a class the suite builds, e.g. an older
        release's PackedSeqParams without some fields) standing in for megatron-core's
        `PackedSeqParams` for the call (R-MEG-4)."""
        ...

    def megatron_postprocess(
        self, output: np.ndarray, meta: Meta, config: Config, *,
        params: dict[str, np.ndarray] | None = None, **adapter: Any,
    ) -> list[np.ndarray]:
        """postprocess_thd_engine on one process (`cp_size` 1, no collective): `output` as given
        (any shape, converted without copying), the PackedSeqParams built from `meta` as
        `megatron_preprocess` builds it, then each field in `params` (such as `cu_seqlens_q`)
        replaced by the given int32 array; keyword arguments in `adapter` go to the adapter.
        Returns the B sequences."""
        ...


class PackedSeqsCheckMethods(Protocol):
    """Capabilities `packed_seqs` and `megatron_checks`: the mask entry points' validation."""

    def packed_postprocess(self, output: np.ndarray, cu_padded: np.ndarray, mask: Any,
                           config: Config, *, params: dict[str, Any] | None = None,
                           **adapter: Any) -> np.ndarray:
        """postprocess_packed_seqs on one process (`cp_size` 1, no collective): `output` and
        `mask` as given (an ndarray converted without copying), the PackedSeqParams built from
        `cu_padded` as for `packed_gathered`, then each field in `params` replaced by the given
        array with its own dtype and shape (None sets the field to None); `adapter` may set
        `batch_size` and `seq_len` (default: the mask's shape). Returns `[B, S, *trail]`."""
        ...


class ApiTypeMethods(Protocol):
    """Capability `api_type_checks`: arguments that are not the implementation's own types."""

    def plan_as_is(self, seqlens: Any, config: Any) -> Any:
        """plan with `config` handed over unchanged (the suite passes a dict, None, ...)."""
        ...

    def pack_as_is(self, seqs: list[np.ndarray], config: Any, cp_rank: int) -> Any:
        """pack with `config` handed over unchanged (the suite passes a dict, None, ...)."""
        ...

    def unpack_as_is(
        self, shards: list[np.ndarray], meta: Meta, config: Config, *, plan: Any = None,
        config_obj: Any = None,
    ) -> Any:
        """unpack as `unpack` does, except that a non-None `plan` or `config_obj` is handed to
        the implementation unchanged in place of the plan built from `meta` or the config built
        from `config`."""
        ...


class Float8Methods(Protocol):
    """Capability `float8`."""

    def pack_float8(
        self, bits: list[np.ndarray], dtype: str, config: Config, cp_rank: int, *,
        pad_value: Any = 0,
    ) -> Packed:
        """`pack` of the uint8 arrays `bits`, each viewed (not converted) as your float8 dtype
        named `dtype`, with `pad_value` as given; the rows come back viewed as uint8."""
        ...


class NativeScalarMethods(Protocol):
    """Capability `native_scalars`."""

    def native_scalar(self, value: bool | int | float) -> Any:
        """Your array type's 0-d array holding `value` (torch: `torch.tensor(value)`). The suite
        puts it in a config field or cp_rank of `pack` and expects the result for the Python
        value itself: accepted for an int, TypeError for a bool or float (spec section 0)."""
        ...


class ValuelessDeviceMethods(Protocol):
    """Capability `valueless_device` (spec R-DEV-1..3): a device that holds no values.

    `devices` is `(host, valueless)` in the target's own names (torch: `("cpu", "meta")`);
    `valueless_forms` maps each input form the target builds there to None where its lengths
    stay on the host (a list of arrays, flat values with host lengths: packed by shape alone),
    else to the field whose values live on the valueless device (a `lengths=` array, a nested
    tensor's offsets or lengths, a mask: with the data, or alone there beside values on the host,
    such as impl's "padded-mask-only"): those are rejected with ValueError naming that field and
    the valueless device (R-DEV-3).
    """

    devices: tuple[str, str]
    valueless_forms: dict[str, str | None]

    def pack_valueless(
        self, form: str, seqs: list[np.ndarray], config: Config, cp_rank: int, *,
        need_roll: bool = False, pad_value: Any = 0, on: list[bool] | None = None,
    ) -> tuple[ArraySpec, ArraySpec, Meta]:
        """`pack_as(form, ...)` with the batch moved to the valueless device (its values lost,
        shapes and dtypes kept). `on` (form "list" only): per sequence, True to put it on the
        valueless device, False to leave it on the host (None: all True). Returns the rows and
        position ids as ArraySpecs and the plan as plain data."""
        ...

    def unpack_valueless(
        self, shards: list[np.ndarray], meta: Meta, config: Config, *,
        on: list[bool] | None = None,
    ) -> list[ArraySpec]:
        """`unpack` with shard `r` on the valueless device where `on[r]` (None: all), else on the
        host; returns the B sequences as ArraySpecs."""
        ...

    def megatron_postprocess_valueless(
        self, output: np.ndarray, meta: Meta, config: Config
    ) -> list[ArraySpec]:
        """With `megatron_checks` too: `megatron_postprocess(output, meta, config)` (one
        process, `cp_size` 1, the PackedSeqParams built from `meta` on the host) of `output`
        (`[1, local_rows, *trail]`) moved to the valueless device; returns the B components of
        the result as ArraySpecs (where their boundaries, on that device, cannot be read: the
        result's values sliced at the batch's host offsets)."""
        ...


class NativeDtypeMethods(Protocol):
    """Capability `native_dtypes` (R-ERR-1): dtypes of the target that NumPy lacks and that are
    none of bool, integer, floating or complex: its `other_dtypes` attribute maps each name to
    its bytes per element."""

    other_dtypes: dict[str, int]

    def pack_viewed(
        self, bits: list[np.ndarray], dtype: str, config: Config, cp_rank: int
    ) -> Any:
        """`pack` of the unsigned-int arrays `bits` (the dtype's width: uint8, uint16 or uint32),
        each viewed (not converted) as your dtype named `dtype`; the suite expects TypeError."""
        ...

"""The `openrlhf` target: OpenRLHF 0.11.2's ring-attention packing, from its wheel.

`ring_attn_utils.py` from the wheel, executed on its own: `unpad_and_slice_tensor` and
`gather_and_pad_tensor`; flash-attn's `bert_padding` helpers are glue, and a recorder replaces
the hand-off to ring_flash_attn: the `cu_seqlens` it gets is `cu_seqlens_padded`. The ring
layout is `cp_layout="contiguous"`, the ring pad on the last sequence.
Mapping, verdict and findings: docs/findings/openrlhf.md.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import torch

from thd_packing.conformance.protocol import Config, Declared, Meta, NotDeclared, Packed

from . import _wheel
from ._wiring import fixed, not_wired, wired

EXPECTED_VERSION = "0.11.2"
RING_PATH = "openrlhf/models/ring_attn_utils.py"
UTILS_PATH = "openrlhf/utils/utils.py"
SFT_PATH = "openrlhf/datasets/sft_dataset.py"
_HINT = f"`nox -s conformance -- --target openrlhf` installs openrlhf=={EXPECTED_VERSION} --no-deps"
_RING = "openrlhf.models.ring_attn_utils"
WIRING = {
    "openrlhf.datasets.sft_dataset.SFTDataset.collate_fn": {
        "item_list": wired("seqs (each [1, L] with a mask of ones)"),
    },
    "openrlhf.utils.utils.zero_pad_sequences": {
        "sequences": wired("seqs (through collate_fn)"),
        "side": fixed("'right' from collate_fn"),
        "value": fixed("the tokenizer's pad id (0) for ids, 0 for masks, from collate_fn"),
        "stack": fixed("False from collate_fn: [1, L] items concatenated"),
    },
    f"{_RING}.unpad_and_slice_tensor": {
        "sequences": wired("seqs (collate_fn's right-padded [B, S]; pack_masked: as drawn)"),
        "attention_mask": wired("the mask form (pack_masked, R-IN-7: left, right and "
                                "scattered padding); pack: collate_fn's right padding"),
        "ring_attn_group": wired("cp_size, cp_rank (contiguous)"),
    },
    f"{_RING}.gather_and_pad_tensor": {
        "tensor": wired("unpack: the shards"),
        "ring_attn_group": wired("cp_size"),
        "ring_attn_pad_len": wired("unpack: total - sum(seqlens)"),
        "indices": wired("unpack: the real rows' indices in [B, S]"),
        "batch": wired("unpack: B"),
        "seqlen": wired("unpack: S"),
    },
    f"{_RING}.get_tensor_in_current_ring_attn_rank": {
        "tensors": not_wired("the same ring slice for a tensor beside the rows (log-probs, "
                             "masks): labels beside the rows are not drawn for OpenRLHF, "
                             "whose labels are a separate tensor; needs a beside-rows rule"),
        "ring_attn_group": not_wired("as tensors"),
        "pad_id": not_wired("as tensors"),
    },
}


# -- glue: flash-attn's bert_padding helpers and einops, as documented ------------------------

def _rearrange(x: torch.Tensor, pattern: str) -> torch.Tensor:
    if pattern.replace(" ", "") != "bs...->(bs)...":
        raise NotImplementedError(f"glue rearrange: pattern {pattern!r}")
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def _index_first_axis(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    return x[indices]


def _unpad_input(hidden: torch.Tensor, mask: torch.Tensor) -> tuple[Any, ...]:
    """flash_attn.bert_padding.unpad_input: the rows where mask is 1, their flat indices, the
    int32 cu_seqlens of the per-row counts, the largest count, the counts."""
    seqlens = mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = _rearrange(hidden, "b s ... -> (b s) ...")
    return flat[indices], indices, cu, int(seqlens.max().item()) if seqlens.numel() else 0, seqlens


def _pad_input(hidden: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> Any:
    """flash_attn.bert_padding.pad_input: scatter the rows back into a zero [batch, seqlen].
    Scattered in NumPy, so that every dtype works (torch's index_put has no uint16 kernel): a
    limit of the glue must not be charged to OpenRLHF."""
    src = hidden.numpy()
    out = np.zeros((batch * seqlen, *src.shape[1:]), dtype=src.dtype)
    out[indices.numpy()] = src
    return torch.from_numpy(out.reshape(batch, seqlen, *src.shape[1:]))


class _RingDist:
    """`torch.distributed` for one ring rank in this process."""

    def __init__(self, world: int, rank: int) -> None:
        self.world, self.rank = world, rank

    def get_rank(self, group: Any = None) -> int:
        return self.rank

    def get_world_size(self, group: Any = None) -> int:
        return self.world


def _stubs(gathered: list[list[torch.Tensor]]) -> dict[str, types.ModuleType]:
    s = _wheel.stub_module

    def all_gather(tensor: torch.Tensor, group: Any) -> torch.Tensor:
        # flash_attn.utils.distributed.all_gather: concatenation along dim 0 of every rank's
        # tensor; the suite sets the shards (transposed like the caller's) before the call.
        return torch.cat(gathered[0], dim=0)

    return {
        "flash_attn": s("flash_attn", package=True),
        "flash_attn.bert_padding": s("flash_attn.bert_padding", {
            "index_first_axis": _index_first_axis, "pad_input": _pad_input,
            "rearrange": _rearrange, "unpad_input": _unpad_input}),
        "flash_attn.utils": s("flash_attn.utils", package=True),
        "flash_attn.utils.distributed": s("flash_attn.utils.distributed",
                                          {"all_gather": all_gather}),
    }


_RING_GROUP = object()


class OpenRLHFTarget:
    """Adapter over OpenRLHF's unpad_and_slice_tensor / gather_and_pad_tensor."""

    name = "openrlhf"
    # No tensor parallelism (DeepSpeed), CP only as contiguous slices of the ring-attention
    # group, token ids only (rows of shape (1, total)); no bucket, FP8, minimum rows, pad value
    # (pad_id=0) or labels beside the rows. The glue builds the padded [B, S] batch, the ring
    # size and rank come from torch.distributed, the shards from an all_gather. max_rows: the
    # glue builds every row it is asked for, and a 2**31-row bucket would fill the memory.
    # Spec 1.2: ring attention slices the pack and aligns no sequence (R-ALIGN-6).
    declared = Declared(lacks=frozenset({"tensor_parallel", "zigzag", "trailing_dims"}),
                        convention={"seq_align": "none"},
                        validated_elsewhere=frozenset({"config", "parallel_state", "batch",
                                                       "unpack"}),
                        max_rows=1 << 20)

    def __init__(self) -> None:
        path, self.version = _wheel.locate("openrlhf", RING_PATH, _HINT)
        utils_path, _ = _wheel.locate("openrlhf", UTILS_PATH, _HINT)
        zero_pad = _wheel.load_function(utils_path, "zero_pad_sequences",
                                        {"torch": torch, "F": torch.nn.functional,
                                         "List": list})
        self.collate_fn = _wheel.load_function(
            _wheel.locate("openrlhf", SFT_PATH, _HINT)[0], "collate_fn",
            {"zero_pad_sequences": zero_pad}, owner="SFTDataset")
        # the dataset's tokenizer pads with 0 (the pad id the suite's pad_value 0 stands for)
        self._dataset = types.SimpleNamespace(tokenizer=types.SimpleNamespace(pad_token_id=0))
        self._gathered: list[list[torch.Tensor]] = [[]]
        self.ring = _wheel.exec_file(path, "_thd_conformance_openrlhf_ring", _stubs(self._gathered))
        for attr in ("unpad_and_slice_tensor", "gather_and_pad_tensor",
                     "get_tensor_in_current_ring_attn_rank"):
            if not hasattr(self.ring, attr):
                raise RuntimeError(f"openrlhf {self.version} has no ring_attn_utils.{attr}")
        self._handed: list[torch.Tensor] = []
        self.ring.update_ring_attn_params = self._handed.append  # type: ignore[attr-defined]
        self.description = (
            f"openrlhf {self.version} models/ring_attn_utils.py (standalone; flash-attn helpers "
            "as glue); cp = the ring-attention group (contiguous slices)"
        )

    def _declined(self, config: Config, need_roll: Any, pad_value: Any, seqs: Any) -> None:
        if need_roll:
            raise NotDeclared("OpenRLHF's labels are a separate tensor")
        if pad_value != 0:
            raise NotDeclared("OpenRLHF pads with 0 (pad_id=0)")
        for key in ("fp8", "bucket", "min_local_rows"):
            if config.get(key) not in (None, False):
                raise NotDeclared(f"{key}: OpenRLHF's packing has none")
        for key, default in (("tail", "last"), ("seq_align", "none"), ("max_num_seqs", None),
                             ("max_seqlen", "exact"), ("fixed_total", None)):
            if config.get(key, default) != default:
                raise NotDeclared(f"{key}={config[key]!r}: not OpenRLHF's packing")
        if config.get("tp_size", 1) != 1:
            raise NotDeclared("OpenRLHF has no tensor parallelism (tp_size 1)")
        if config.get("cp_size", 1) != 1 and config.get("cp_layout", "zigzag") != "contiguous":
            raise NotDeclared("ring attention here slices contiguously: no zigzag")
        if any(isinstance(s, np.ndarray) and s.ndim != 1 for s in seqs):
            raise NotDeclared("the packed row is (1, total) token ids")

    def _padded_batch(self, seqs: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """OpenRLHF's input, a right-padded [B, S] batch and its attention mask, from its own
        `SFTDataset.collate_fn` on the items its dataset yields: ids, a mask of ones and a loss
        mask, each [1, L] (the mask int64, as its tokenizer's)."""
        items = []
        for s in seqs:
            ids = torch.from_numpy(np.ascontiguousarray(s))[None]
            ones = torch.ones(ids.shape, dtype=torch.int64)
            items.append((ids, ones, ones))
        batch, mask, _ = self.collate_fn(self._dataset, items)
        return batch, mask

    def pack(
        self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
        pad_value: Any = 0,
    ) -> Packed:
        self._declined(config, need_roll, pad_value, seqs)
        batch, mask = self._padded_batch(seqs)
        lengths = np.asarray([s.shape[0] for s in seqs], dtype=np.int32)
        return self._unpad_and_slice(batch, mask, lengths, config, cp_rank)

    def pack_masked(self, values: Any, mask: Any, config: Config, cp_rank: Any, *,
                    need_roll: Any = False, pad_value: Any = 0) -> Packed:
        """Capability `mask_form` (R-IN-7): OpenRLHF's own input, a padded [B, S] batch and
        its attention mask, handed over as drawn (left, right or scattered padding)."""
        self._declined(config, need_roll, pad_value, [])
        if np.ndim(values) != 2:
            raise NotDeclared("the packed row is (1, total) token ids")
        lengths = np.asarray(mask).sum(axis=1, dtype=np.int64).astype(np.int32)
        return self._unpad_and_slice(torch.from_numpy(np.asarray(values)),
                                     torch.from_numpy(np.asarray(mask)), lengths, config,
                                     cp_rank)

    def _unpad_and_slice(self, batch: torch.Tensor, mask: torch.Tensor, lengths: np.ndarray,
                         config: Config, cp_rank: Any) -> Packed:
        cp = int(config.get("cp_size", 1))
        self.ring.dist = _RingDist(cp, cp_rank)  # type: ignore[attr-defined]
        self._handed.clear()
        rows, pos, _, pad_len, _ = self.ring.unpad_and_slice_tensor(
            batch, mask, _RING_GROUP if cp > 1 else None)
        if self._handed:
            cu_padded = self._handed[-1].numpy().astype(np.int32)
        else:  # no ring group: cu_seqlens stays unpad_input's
            cu_padded = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        meta: Meta = {
            "seqlens": lengths,
            "seqlens_padded": np.diff(cu_padded).astype(np.int32),
            "cu_seqlens_padded": cu_padded,
            "max_seqlen": int(np.diff(cu_padded).max()) if cu_padded.size > 1 else 0,
            "total": int(lengths.sum()) + int(pad_len),
            "local_rows": int(rows.shape[-1]),
        }
        return Packed(rows[0].numpy(), pos[0].numpy(), meta)

    def unpack(self, shards: list[np.ndarray], meta: Meta, config: Config) -> list[np.ndarray]:
        tensors = [torch.from_numpy(np.ascontiguousarray(s))[None] for s in shards]
        b = int(meta.get("num_seqs", np.asarray(meta["seqlens"]).size))
        lengths = [int(x) for x in np.asarray(meta["seqlens"])[:b]]
        width = max(lengths, default=0)
        mask = torch.zeros(len(lengths), width, dtype=torch.int64)
        for i, n in enumerate(lengths):
            mask[i, :n] = 1
        indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
        pad_len = int(meta["total"]) - sum(lengths)
        cp = len(tensors)
        self._gathered[0] = [t.transpose(0, 1) for t in tensors]
        self.ring.dist = _RingDist(cp, 0)  # type: ignore[attr-defined]
        out = self.ring.gather_and_pad_tensor(
            tensors[0], _RING_GROUP if cp > 1 else None, pad_len, indices, len(lengths), width)
        return [out[i, :n].numpy() for i, n in enumerate(lengths)]


TARGET = OpenRLHFTarget

"""The rejection table's rows for the other input forms (see rejections.py): the mask form,
unpack's shards, plans and configs of a foreign type, verl's mask entry points. Imported by
`rejections.rows()`, which files them into the same TABLE.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from thd_packing import reference

from .protocol import Meta, plain_meta
from .rejections import Named, Row, T, V, _add, _fixed, two_sequences

# ----------------------------------------------------------------------------------------------
# The mask form (R-IN-7, capability mask_form)

MB, MS = 3, 16


def _masked(make: Callable[[np.ndarray, np.ndarray], tuple[Any, Any]]
            ) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def args(base: dict[str, Any]) -> dict[str, Any]:
        # No trailing dimension: a token-id packer takes these too, and the rows are about the
        # mask form, not about trailing shapes.
        values = np.arange(MB * MS, dtype=np.int64).reshape(MB, MS)
        mask = np.zeros((MB, MS), dtype=bool)
        mask[0, 2:9] = True
        mask[1, [0, 1, 2, 3, 4, 11]] = True
        v, m = make(values, mask)
        return {"values": v, "mask": m, "config": dict(base)}
    return args


def _strided(m: np.ndarray) -> np.ndarray:
    wide = np.zeros((MB, 2 * MS), dtype=bool)
    wide[:, ::2] = m
    return wide[:, ::2]


def _read_only(m: np.ndarray) -> np.ndarray:
    m.setflags(write=False)
    return m


MASKS: list[tuple[str, Callable[..., tuple[Any, Any]], type[Exception] | None,
                  tuple[Any, ...]]] = [
    ("mask-uint8", lambda v, m: (v, m.astype(np.uint8)), T, ("mask", "uint8")),
    ("mask-int64", lambda v, m: (v, m.astype(np.int64)), T, ("mask", "int64")),
    ("mask-float32", lambda v, m: (v, m.astype(np.float32)), T, ("mask", "float32")),
    ("mask-list", lambda v, m: (v, m.tolist()), T, ("mask", "list")),
    ("mask-none-like", lambda v, m: (v, "all"), T, ("mask", "str")),
    ("mask-short", lambda v, m: (v, m[:, :-1]), V, ("mask", 15)),
    ("mask-long", lambda v, m: (v, np.ones((MB, MS + 1), bool)), V, ("mask", 17)),
    ("mask-rows", lambda v, m: (v, np.ones((MB + 1, MS), bool)), V, ("mask", 4)),
    ("mask-1-d", lambda v, m: (v, m[0]), V, ("mask", 16)),
    ("mask-3-d", lambda v, m: (v, m[..., None]), V, ("mask", 16, 1)),
    ("values-1-d", lambda v, m: (v[0], m[0]), V, ("batch|mask", 16)),
    ("values-list", lambda v, m: (list(v), m), T, ("batch|mask", "list")),
    ("values-empty", lambda v, m: (v[:0], m[:0]), V, ("batch|mask",)),
    ("read-only", lambda v, m: (v, _read_only(m)), None, ()),
    ("broadcast", lambda v, m: (v, np.broadcast_to(m[1], (MB, MS))), None, ()),
    ("column-major", lambda v, m: (v, np.asfortranarray(m)), None, ()),
    ("strided", lambda v, m: (v, _strided(m)), None, ()),
]
for _name, _make, _mask_cls, _shown in MASKS:
    # A refusal is the packer's own validation of its batch (declinable as batch_checks); a
    # valid look-alike needs the mask form alone.
    _add("R-IN-7", Row(f"mask-form-{_name}", "pack_masked", _masked(_make), _mask_cls, _shown,
                       needs=("mask_form",) if _mask_cls is None else ("mask_form",
                                                                        "batch_checks"),
                       also=("R-ERR-7",) if _name == "values-empty" else
                       ("R-ERR-1",) if _mask_cls is T else ("R-IN-6", "R-ROW-1")
                       if _mask_cls is None
                       else ()))

# ----------------------------------------------------------------------------------------------
# Unpack (R-ERR-11): the shards, and a plan or config of a foreign type (R-ERR-1)


def _set(items: list[Any], at: int, value: Any) -> list[Any]:
    items[at] = value
    return items


# fault -> (the shards and meta it gives from good ones, class, what the message names)
UNPACKS: dict[str, tuple[Callable[[Any, Meta, int], Any], type[Exception], tuple[Any, ...]]] = {
    "too-few-shards": (lambda sh, meta, n: sh[:-1], V, ()),
    "too-many-shards": (lambda sh, meta, n: sh + [sh[0].copy()], V, ()),
    "short-shard": (lambda sh, meta, n: _set(sh, -1, sh[-1][:-1]), V, ()),
    "long-shard": (lambda sh, meta, n: _set(sh, 0, np.zeros((n + 2, 11), np.int64)), V, ()),
    "trail-mismatch": (lambda sh, meta, n: _set(sh, -1, np.zeros((n, 13), np.int64)), V,
                       (11, 13)),
    "dtype-mismatch": (lambda sh, meta, n: _set(sh, -1, sh[-1].astype(np.int32)), V, ()),
    "total-mismatch": (lambda sh, meta, n: meta.update(total=meta["total"] + 4) or sh, V, ()),
    "shards-stacked": (lambda sh, meta, n: np.stack(sh), T, (Named(np.zeros(1)),)),
    "shards-none": (lambda sh, meta, n: None, T, ()),
    "shards-dict": (lambda sh, meta, n: dict(enumerate(sh)), T, (Named({}),)),
    "element-list": (lambda sh, meta, n: _set(sh, -1, sh[-1].tolist()), T, ("list",)),
    "element-none": (lambda sh, meta, n: _set(sh, 0, None), T, (Named(None),)),
}


def _unpack(kind: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def args(base: dict[str, Any]) -> dict[str, Any]:
        plan = reference.plan_thd([5, 3], reference.PackConfig(**base))
        meta = plain_meta(plan)
        shards = [np.zeros((plan.local_rows, 11), np.int64) for _ in range(base["cp_size"])]
        shards = UNPACKS[kind][0](shards, meta, plan.local_rows)
        return {"shards": shards, "meta": meta, "config": dict(base)}
    return args


for _name, (_, _cls, _shown) in UNPACKS.items():
    _add("R-ERR-1" if _cls is T else "R-ERR-11", Row(
        f"unpack-{_name}", "unpack", _unpack(_name), _cls, _shown,
        needs=("unpack", "unpack_checks"), also=("R-ERR-11",)))

FOREIGN = {"dict": lambda meta, config: (dict(meta), dict(config)),
           "str": lambda meta, config: ("plan", "config"),
           "tuple": lambda meta, config: (tuple(meta.values()), tuple(config.values()))}


def _foreign(kind: str, field: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def args(base: dict[str, Any]) -> dict[str, Any]:
        cfg = reference.PackConfig(**base)
        plan = reference.plan_thd([5, 3], cfg)
        meta = plain_meta(plan)
        bad_plan, bad_config = FOREIGN[kind](meta, dict(base))
        shards = [reference.pack_thd(two_sequences(), cfg, r)[0] for r in range(cfg.cp_size)]
        return {"shards": shards, "meta": meta, "config": dict(base), "field": field,
                "bad": bad_plan if field == "plan" else bad_config, "plan": plan, "cfg": cfg}
    return args


for _kind in sorted(FOREIGN):
    _bad_example = FOREIGN[_kind]({"a": 1}, {"b": 2})
    _add("R-ERR-1",
         Row(f"unpack-foreign-plan-{_kind}", "unpack_as_is", _foreign(_kind, "plan"), T,
             ("plan", Named(_bad_example[0])), needs=("api_type_checks",)),
         Row(f"unpack-foreign-config-{_kind}", "unpack_as_is", _foreign(_kind, "config"), T,
             ("config", Named(_bad_example[1])), needs=("api_type_checks",)),
         Row(f"pack-foreign-config-{_kind}", "pack_as_is", _foreign(_kind, "config"), T,
             ("config", Named(_bad_example[1])), needs=("api_type_checks",)),
         Row(f"plan-foreign-config-{_kind}", "plan_as_is",
             _fixed(seqlens=[3, 4], config={"dict": {}, "str": "config", "tuple": ()}[_kind]), T,
             ("config", type({"dict": {}, "str": "", "tuple": ()}[_kind]).__name__),
             needs=("api_type_checks",)))

# ----------------------------------------------------------------------------------------------
# verl's mask entry points (R-MEG-8, R-MEG-9; capabilities packed_seqs and megatron_checks)

MEG_CONFIG: dict[str, Any] = {"tp_size": 2}  # alignment 2: padded offsets differ from real ones
MEG_LENGTHS = (3, 5)


def _meg_case() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(values [B, S], mask [B, S] right-padded, rows [1, local_rows], cu_seqlens_padded)."""
    mask = np.zeros((len(MEG_LENGTHS), 6), dtype=bool)
    for i, n in enumerate(MEG_LENGTHS):
        mask[i, :n] = True
    values = (np.arange(mask.size, dtype=np.float32) + 1).reshape(mask.shape)
    cfg = reference.PackConfig(**MEG_CONFIG)
    rows, _, plan = reference.pack_thd([values[i][mask[i]] for i in range(len(MEG_LENGTHS))],
                                       cfg, 0)
    return values, mask, rows[None], np.asarray(plan.cu_seqlens_padded)


_BAD_MASKS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], type[Exception]]] = {
    "int64": (lambda m: m.astype(np.int64), T), "uint8": (lambda m: m.astype(np.uint8), T),
    "float32": (lambda m: m.astype(np.float32), T),
    "short": (lambda m: np.ascontiguousarray(m[:, :-1]), V),
    "extra-row": (lambda m: np.concatenate([m, m[:1]]), V),
    "1-D": (lambda m: np.ascontiguousarray(m[0]), V),
    "3-D": (lambda m: np.ascontiguousarray(m[..., None]), V)}
_MEG = ("packed_seqs", "megatron_checks")


def _meg(**change: Callable[[np.ndarray], Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """verl's case with `change`s applied: "mask", "output" (of the rows) or "cu" (the
    cu_seqlens_q_padded handed over in params); postprocess gets batch_size and seq_len of the
    good mask when the mask changes."""
    def args(base: dict[str, Any]) -> dict[str, Any]:
        values, mask, out, cu = _meg_case()
        a: dict[str, Any] = {"values": values, "mask": mask, "output": out, "cu": cu}
        if "mask" in change:
            a.update(mask=change["mask"](mask), batch_size=mask.shape[0], seq_len=mask.shape[1])
        if "output" in change:
            a["output"] = np.ascontiguousarray(change["output"](out))
        if "cu" in change:
            a["params"] = {"cu_seqlens_q_padded": change["cu"](cu)}
        return a
    return args


for _kind, (_bad_mask, _cls) in _BAD_MASKS.items():
    _also = ("R-ERR-1",) if _cls is T else ("R-ERR-9",)
    _add("R-MEG-8", Row(f"preprocess-mask-{_kind}", "packed_preprocess", _meg(mask=_bad_mask),
                        _cls, ("attention_mask",), needs=_MEG, also=_also))
    _add("R-MEG-9", Row(f"postprocess-mask-{_kind}", "packed_postprocess",
                        _meg(mask=_bad_mask), _cls, ("attention_mask",), needs=_MEG,
                        also=_also))
_OUTPUTS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "no-batch-dim": lambda r: r[0], "batch-2": lambda r: np.concatenate([r, r]),
    "rows-short": lambda r: r[:, :-2], "rows-long": lambda r: np.concatenate([r, r], axis=1),
    "scalar": lambda r: np.array(1.0, np.float32)}
for _kind, _shape in _OUTPUTS.items():
    _add("R-ERR-11", Row(f"postprocess-output-{_kind}", "packed_postprocess",
                         _meg(output=_shape), V, ("output|shards",), needs=_MEG,
                         also=("R-MEG-9",)))
_CU: dict[str, tuple[Callable[[np.ndarray], np.ndarray], type[Exception], tuple[Any, ...]]] = {
    "one-more": (lambda c: np.append(c, c[-1]).astype(np.int32), V, (4,)),
    "one-less": (lambda c: c[:-1].copy(), V, (2,)),
    "2-D": (lambda c: c[None].copy(), V, ()),
    "float": (lambda c: c.astype(np.float32), T, ())}
for _kind, (_forge_cu, _cls, _shown) in _CU.items():
    _add("R-ERR-11", Row(f"postprocess-cu_seqlens-{_kind}", "packed_postprocess",
                         _meg(cu=_forge_cu), _cls, ("cu_seqlens_q_padded", *_shown),
                         needs=_MEG, also=("R-MEG-9",)))
_add("R-ERR-11", Row(
    "postprocess-indivisible-total", "packed_gathered",
    _fixed(shards=[np.zeros(2, np.float32), np.ones(2, np.float32)],
           cu=np.array([0, 5], np.int32), mask=np.array([[True, True, True, False]]),
           config={"cp_size": 2}),
    V, ("cp_size", 5), needs=_MEG, also=("R-MEG-9",)))

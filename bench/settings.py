"""The static packing parameters the planner and the probe vary, as one value (R-IN-3)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

# Spec 1.1's fields and their defaults: a default is passed to PackConfig by omission, so the
# same settings also drive a PackConfig that predates the field.
CONVENTION_DEFAULTS: dict[str, Any] = {
    "tail": "last", "seq_align": "tp_cp", "max_num_seqs": None, "max_seqlen": "exact",
    "fixed_total": None,
}


@dataclass(frozen=True)
class PackSettings:
    """Everything in a PackConfig except the bucket, which the planner varies itself."""

    tp_size: int = 1
    cp_size: int = 1
    cp_layout: str = "zigzag"
    fp8: bool | str = False
    min_local_rows: int | None = None
    tail: str = "last"
    seq_align: str = "tp_cp"
    max_num_seqs: int | None = None
    max_seqlen: str = "exact"
    fixed_total: int | None = None

    def replace(self, **changes: Any) -> PackSettings:
        return dataclasses.replace(self, **changes)

    def config_kwargs(self, bucket: int | None) -> dict[str, Any]:
        """PackConfig keyword arguments for this packing with ``bucket``."""
        out: dict[str, Any] = {"tp_size": self.tp_size, "cp_size": self.cp_size,
                               "cp_layout": self.cp_layout, "fp8": self.fp8, "bucket": bucket,
                               "min_local_rows": self.min_local_rows}
        for name, default in CONVENTION_DEFAULTS.items():
            value = getattr(self, name)
            if value != default or type(value) is not type(default):
                out[name] = value
        return out

    @property
    def convention(self) -> str:
        """The spec 1.1 and 1.2 convention fields, as a short label."""
        fp8 = "off" if self.fp8 is False else str(self.fp8)
        fixed = "" if self.fixed_total is None else f" fixed_total={self.fixed_total}"
        return f"tail={self.tail} seq_align={self.seq_align} fp8={fp8}{fixed}"

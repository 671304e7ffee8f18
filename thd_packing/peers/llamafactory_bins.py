"""LLaMA-Factory 0.9.5's packed supervised processor as binner targets (spec/bins.md).

`PackedSupervisedDatasetProcessor.preprocess_dataset(examples)` encodes a batch of examples,
drops each longer than `data_args.cutoff_len`, bins the rest with
`greedy_knapsack(lengths, cutoff_len)` (fill one pack at a time, each time with the largest
remaining example that fits, found by bisection), maps each length back to an example
(`length2indexes[length].pop()`), and concatenates each pack, padded to `cutoff_len + 1`.
`data_args.packing` and `data_args.neat_packing` (one target each) bin alike; neat packing
adds per-example attention ids and `packing_params`.

`supervised.py` and `processor_utils.py` are executed from the wheel under a private package
name (`llamafactory.data` imports peft and a training stack): `extras.logging` is a stub
logger and `extras.constants` holds the wheel's own `IGNORE_INDEX`, read from its file. The
tokenizer step is the one part replaced: `_encode_data_example` (an override of the template's
encoding) hands back each example's ids, token values naming example and offset, and the bins
are read off the packed rows, padding (id -1) left out. Findings:
docs/findings/bins-llamafactory.md.
"""

from __future__ import annotations

import ast
import logging
import types
from pathlib import Path
from typing import Any

from thd_packing.conformance.bins_protocol import BinDeclared, Binned

from . import _binning, _wheel
from ._wiring import Wiring, fixed, no_effect, not_wired, wired

EXPECTED_VERSION = "0.9.5"
SUPERVISED = "llamafactory/data/processor/supervised.py"
UTILS = "llamafactory/data/processor/processor_utils.py"
CONSTANTS = "llamafactory/extras/constants.py"
_HINT = f"install llamafactory=={EXPECTED_VERSION} --no-deps (the `bins` extra)"
PAD_ID = -1  # no token value names an example with it (_binning.token_ids are >= 0)
_PKG = "_thd_conformance_llamafactory"

WIRING: Wiring = {
    # PackedSupervisedDatasetProcessor's fields are its base dataclass's, in processor_utils.py
    "llamafactory.data.processor.processor_utils.DatasetProcessor": {
        "template": not_wired("encodes messages into ids; the adapter's _encode_data_example "
                              "hands each example's ids instead, so no template runs (the "
                              "lengths are what the template would have made)"),
        "tokenizer": no_effect("tokenizer.pad_token_id (-1 here) fills each pack after "
                               "binning; the bins do not read it"),
        "processor": no_effect("multimodal processor, not read by the text path"),
        "data_args.cutoff_len": wired("capacity (the value after DataArguments subtracts 1 "
                                      "under packing: the longest pack of examples)"),
        "data_args.neat_packing": wired("the target: llamafactory-packing (False), "
                                        "llamafactory-neat-packing (True); the bins are "
                                        "the same, the attention ids differ"),
        "data_args.mask_history": no_effect("read by the template encoding only"),
        "data_args.train_on_prompt": no_effect("read by the template encoding only"),
    },
    "llamafactory.data.processor.supervised.PackedSupervisedDatasetProcessor."
    "preprocess_dataset": {
        "examples": wired("lengths: one example per length, a one-message prompt and a "
                          "one-message response (the shape it keeps), in one batch"),
    },
    "llamafactory.data.processor.processor_utils.greedy_knapsack": {
        "numbers": wired("the lengths that fit (cutoff_len), through preprocess_dataset"),
        "capacity": wired("capacity, through preprocess_dataset's data_args.cutoff_len"),
    },
    "llamafactory.data.processor.processor_utils.search_for_fit": {
        "numbers": fixed("the sorted remaining lengths, from greedy_knapsack"),
        "capacity": fixed("the pack's remaining capacity, from greedy_knapsack"),
    },
}


def _constant(path: Path, name: str) -> Any:
    """A module-level literal of the wheel's file, read without importing it."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"{path} has no {name}")


class _Logger:
    def __init__(self, name: str | None = None) -> None:
        self.logger = logging.getLogger(name or "llamafactory")

    def warning_rank0(self, msg: str) -> None:
        self.logger.warning(msg)


def _load() -> tuple[types.ModuleType, types.ModuleType, str]:
    """The wheel's supervised and processor_utils modules, and its version."""
    path, version = _wheel.locate("llamafactory", SUPERVISED, _HINT)
    utils_path, _ = _wheel.locate("llamafactory", UTILS, _HINT)
    constants_path, _ = _wheel.locate("llamafactory", CONSTANTS, _HINT)
    s = _wheel.stub_module
    utils = _wheel.exec_file(utils_path, f"{_PKG}.data.processor.processor_utils", {})
    supervised = _wheel.exec_file(path, f"{_PKG}.data.processor.supervised", {
        _PKG: s(_PKG, package=True),
        f"{_PKG}.data": s(f"{_PKG}.data", package=True),
        f"{_PKG}.data.processor": s(f"{_PKG}.data.processor", package=True),
        f"{_PKG}.data.processor.processor_utils": utils,
        f"{_PKG}.extras": s(f"{_PKG}.extras", {
            "logging": s(f"{_PKG}.extras.logging", {"get_logger": _Logger})}, package=True),
        f"{_PKG}.extras.constants": s(f"{_PKG}.extras.constants", {
            "IGNORE_INDEX": _constant(constants_path, "IGNORE_INDEX")}),
    })
    return supervised, utils, version


class _LlamaFactoryPacking:
    neat_packing = False
    name = ""
    declared_bins = BinDeclared()

    def __init__(self) -> None:
        self.supervised, self.utils, self.version = _load()

        class Processor(self.supervised.PackedSupervisedDatasetProcessor):  # type: ignore[name-defined,misc]
            """The tokenizer step replaced: the prompt message carries the example's ids."""

            def _encode_data_example(self, prompt: Any, response: Any, system: Any,
                                     tools: Any, images: Any, videos: Any,
                                     audios: Any) -> tuple[list[int], list[int]]:
                ids = list(prompt[0]["ids"])
                return ids, list(ids)

        self.processor_class = Processor
        self.description = (f"llamafactory {self.version} PackedSupervisedDatasetProcessor "
                            f"(neat_packing={self.neat_packing})")

    def bin(self, lengths: Any, config: dict[str, Any]) -> Binned:
        _binning.refuse(config, f"llamafactory {self.name}", {
            "cost": ("tokens",), "overflow": ("drop",), "order": ("placement",),
            "min_bins": (1,), "bins_multiple_of": (1,)})
        ids = _binning.token_ids(lengths)
        n = len(ids)
        data_args = types.SimpleNamespace(cutoff_len=config["capacity"],
                                          neat_packing=self.neat_packing,
                                          mask_history=False, train_on_prompt=False)
        processor = self.processor_class(template=None,
                                         tokenizer=types.SimpleNamespace(pad_token_id=PAD_ID),
                                         processor=None, data_args=data_args)
        out = processor.preprocess_dataset({
            "_prompt": [[{"role": "user", "content": "", "ids": x}] for x in ids],
            "_response": [[{"role": "assistant", "content": ""}] for _ in range(n)],
            "_system": [""] * n, "_tools": [""] * n, "_images": [None] * n,
            "_videos": [None] * n, "_audios": [None] * n})
        return Binned(bins=[_binning.pieces_of([t for t in row if t != PAD_ID])
                            for row in out["input_ids"]])


class LlamaFactoryPacking(_LlamaFactoryPacking):
    """`packing: true`. greedy_knapsack's docstring: "Implement efficient greedy algorithm
    with binary search for the knapsack problem": no spec algorithm claimed (it fills one pack
    at a time with the largest example that fits, which gives first fit decreasing's packs by
    length; ties among equal lengths go last example first)."""

    neat_packing = False
    name = "llamafactory-packing"
    declared_bins = BinDeclared(
        overflow=frozenset({"drop"}), order="placement", lacks=frozenset({"zero_length"}),
        notes={"zero_length": "lacking: a template never encodes an empty example, and an "
                              "empty one leaves no token in the packed row to be read"})


class LlamaFactoryNeatPacking(_LlamaFactoryPacking):
    """`neat_packing: true`: the same bins, each example with its own attention id."""

    neat_packing = True
    name = "llamafactory-neat-packing"
    declared_bins = LlamaFactoryPacking.declared_bins


TARGETS = (LlamaFactoryPacking, LlamaFactoryNeatPacking)

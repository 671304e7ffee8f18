"""Load upstream verl 0.9.1's ``verl/models/mcore/util.py`` on its own, for timing only.

verl's package ``__init__`` pulls in a whole training stack; ``util.py`` itself needs only torch,
megatron-core and two small names from ``verl.utils``. We execute the installed file under a
private module name with those two names stubbed, then give the module a fake Megatron parallel
state, so ``preprocess_thd_engine`` runs on one process as if it were any (tp, cp, rank).
Nothing here copies verl code: we only import the installed wheel.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import types
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PRIVATE_NAME = "_thd_bench_verl_mcore_util"


class VerlUnavailable(RuntimeError):
    """verl (or megatron-core) is not installed in this environment."""


class _OnceLogger(logging.Logger):
    """A logger with ``warning_once``: verl gets it from transformers' monkeypatch of logging."""

    def __init__(self, name: str) -> None:
        super().__init__(name, logging.ERROR)
        self._seen: set[str] = set()

    def warning_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if msg not in self._seen:
            self._seen.add(msg)
            self.warning(msg, *args, **kwargs)


@dataclass
class FakeParallelState:
    """The four Megatron parallel-state getters that util.py calls, with fixed answers."""

    tp: int = 1
    cp: int = 1
    cp_rank: int = 0

    def get_tensor_model_parallel_world_size(self) -> int:
        return self.tp

    def get_context_parallel_world_size(self) -> int:
        return self.cp

    def get_context_parallel_rank(self) -> int:
        return self.cp_rank

    def get_context_parallel_group(self) -> None:
        return None


def _util_path() -> Path:
    spec = importlib.util.find_spec("verl")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise VerlUnavailable("verl is not installed (pip install --no-deps verl==0.9.1)")
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / "mcore" / "util.py"
    if not path.is_file():
        raise VerlUnavailable(f"verl is installed but {path} is missing")
    return path


def verl_version() -> str | None:
    """The installed verl distribution's version, or None."""
    from importlib import metadata

    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return None


def load_verl_util() -> types.ModuleType:
    """Execute the installed util.py with ``verl.utils.{device,model}`` stubbed; cached."""
    cached = sys.modules.get(_PRIVATE_NAME)
    if cached is not None:
        return cached
    path = _util_path()
    try:
        import megatron.core.packed_seq_params  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise VerlUnavailable(f"megatron-core is needed to load verl's util.py: {exc}") from exc

    device = types.ModuleType("verl.utils.device")
    device.is_npu_available = False  # type: ignore[attr-defined]
    model = types.ModuleType("verl.utils.model")
    model.CausalLMOutputForPPO = object  # type: ignore[attr-defined]  # only a type annotation
    pkg = types.ModuleType("verl")
    pkg.__path__ = []
    utils = types.ModuleType("verl.utils")
    utils.__path__ = []
    stubs = {"verl": pkg, "verl.utils": utils, "verl.utils.device": device,
             "verl.utils.model": model}
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location(_PRIVATE_NAME, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec.loader.exec_module(mod)
    finally:
        # Put back whatever was there, so a real verl import elsewhere is not shadowed.
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    mod.logger = _OnceLogger(_PRIVATE_NAME)  # type: ignore[attr-defined]
    mod.mpu = FakeParallelState()  # type: ignore[attr-defined]
    sys.modules[_PRIVATE_NAME] = mod
    return mod


def set_parallel_state(mod: types.ModuleType, *, tp: int, cp: int, cp_rank: int) -> None:
    """Point the loaded module's ``mpu`` at a fake state for (tp, cp, cp_rank)."""
    mod.mpu = FakeParallelState(tp=tp, cp=cp, cp_rank=cp_rank)  # type: ignore[attr-defined]

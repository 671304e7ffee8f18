"""Target loading: a built-in name or `module:attr`.

A built-in name is a file: `--target foo-bar` loads `conformance/targets/foo_bar.py` (the
project's own packers) or `peers/foo_bar.py` (other trainers' packers, adapters outside the
suite like a user's), and takes its module attribute `TARGET`. `module:attr` takes `attr` of
any importable module, or of a built-in file (`--target areal-bins:ArealFFD`, for a file that
holds several targets). Either way the object is a target, a class, or a factory called with no
arguments.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

from ..protocol import problems

_ROOT = Path(__file__).resolve().parent.parent.parent
# (package, folder), searched in this order; `peers` is shipped beside `conformance`.
HOMES = (("thd_packing.conformance.targets", _ROOT / "conformance" / "targets"),
         ("thd_packing.peers", _ROOT / "peers"))


class TargetLoadError(Exception):
    """The target could not be loaded; the suite stops with this message."""


def builtin_names() -> list[str]:
    """The built-in target names: the modules of conformance/targets/ and peers/ that define
    `TARGET`, file names with '_' as '-'."""
    names = []
    for _, folder in HOMES:
        for path in sorted(folder.glob("[!_]*.py")):
            if "\nTARGET" in path.read_text():
                names.append(path.stem.replace("_", "-"))
    return names


def _builtin(stem: str) -> str | None:
    """The module of a built-in file stem ('_' or '-'), None if there is none."""
    stem = stem.replace("-", "_")
    for package, folder in HOMES:
        if stem.isidentifier() and (folder / f"{stem}.py").is_file():
            return f"{package}.{stem}"
    return None


def _resolve(spec: str) -> tuple[str, str]:
    if ":" in spec:  # module:attr; where no module has the name, a built-in file's
        module_name, _, attr = spec.partition(":")  # (areal-bins:ArealFFD)
        try:
            importable = importlib.util.find_spec(module_name) is not None
        except (ImportError, ValueError):
            importable = False
        return (module_name if importable else _builtin(module_name) or module_name), attr
    module = _builtin(spec)
    if module is not None:
        return module, "TARGET"
    raise TargetLoadError(f"unknown target {spec!r}: use one of {builtin_names()} or "
                          "'module:attr'")


def load_target(spec: str) -> Any:
    """The target named by `spec` (a built-in name or `module:attr`)."""
    module_name, attr = _resolve(spec)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # surfaced verbatim: a missing dependency must fail loudly
        raise TargetLoadError(f"target {spec!r}: cannot import {module_name!r}: {exc!r}") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError as exc:
        raise TargetLoadError(
            f"target {spec!r}: {module_name!r} has no attribute {attr!r}"
        ) from exc
    has_role = any(hasattr(obj, role) for role in ("pack", "bin", "partition"))
    if isinstance(obj, type) or (not has_role and callable(obj)):  # a class or a factory
        try:
            obj = obj()
        except Exception as exc:
            raise TargetLoadError(f"target {spec!r}: creating the target failed: {exc!r}") from exc
    wrong = problems(obj)
    if wrong:
        raise TargetLoadError(f"target {spec!r} does not follow the protocol "
                              f"(conformance/protocol.py): {'; '.join(wrong)}")
    return obj

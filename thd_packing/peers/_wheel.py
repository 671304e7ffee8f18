"""Loading one module or one function of an installed wheel without its package.

Peers such as verl ship their packing code inside packages whose `__init__` imports a whole
training stack. The suite judges the code itself, so it executes the one file from the wheel
under a private module name, with stub modules standing in for the package's other imports
during that import only; or, where the file itself needs the stack, compiles only the named
function's definition from the wheel's source (line numbers kept, so tracebacks point into the
wheel).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any


def locate(dist_name: str, rel_path: str, install_hint: str) -> tuple[Path, str]:
    """The file `rel_path` of the installed distribution, and the distribution's version."""
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(f"{dist_name} is not installed; {install_hint}") from None
    path = Path(str(dist.locate_file(rel_path)))
    if not path.is_file():
        raise RuntimeError(f"{dist_name} {dist.version} has no {rel_path}")
    return path, dist.version


def _unused(name: str) -> Any:
    def stub(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"stub {name} called: it is not part of the packing path under test")

    return stub


def stub_module(name: str, attrs: dict[str, Any] | None = None, *, package: bool = False,
                callables: tuple[str, ...] = ()) -> types.ModuleType:
    """A stand-in module: given attributes, and callables that fail loudly if ever used."""
    module = types.ModuleType(name)
    if package:
        module.__path__ = []
    for key, value in (attrs or {}).items():
        setattr(module, key, value)
    for key in callables:
        setattr(module, key, _unused(f"{name}.{key}"))
    return module


def exec_file(path: Path, private_name: str,
              stubs: dict[str, types.ModuleType]) -> types.ModuleType:
    """Execute `path` as module `private_name` with `stubs` in sys.modules during the import."""
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location(private_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        # Registered under its private name for good: dataclasses (and pickling) look the
        # module of a class up in sys.modules while the file runs.
        sys.modules[private_name] = module
        spec.loader.exec_module(module)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    return module


def load_function(path: Path, name: str, namespace: dict[str, Any],
                  owner: str | None = None) -> Any:
    """Compile only the definition of `name` (a method of class `owner` if given) from `path`.

    The function's globals are `namespace`; it must hold every global the function uses.
    Raises LookupError if the file has no such definition (a feature probe).
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    scopes: list[ast.AST] = [tree]
    if owner is not None:
        scopes = [node for node in ast.walk(tree)
                  if isinstance(node, ast.ClassDef) and node.name == owner]
    for scope in scopes:
        for node in getattr(scope, "body", []):
            if isinstance(node, ast.FunctionDef) and node.name == name:
                node.decorator_list = []
                code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
                exec(code, namespace)  # noqa: S102 - the peer's own definition, from its wheel
                return namespace[name]
    where = f"class {owner}" if owner else "module level"
    raise LookupError(f"{path} has no function {name!r} at {where}")


def find_method_owner(path: Path, name: str) -> str | None:
    """The first class in `path` that defines method `name`, or None."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
            isinstance(item, ast.FunctionDef) and item.name == name for item in node.body
        ):
            return node.name
    return None


def load_class(path: Path, name: str, namespace: dict[str, Any]) -> type:
    """Compile only the module-level class `name` from `path`, decorators included (a
    `@dataclass` stays one), into a private module holding `namespace`, which must hold every
    global its body and decorators use. Raises LookupError if the file has no such class (a
    feature probe)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            module = types.ModuleType(f"_thd_conformance_{path.stem}_{name}")
            module.__dict__.update(namespace)
            module.__file__ = str(path)
            sys.modules[module.__name__] = module  # dataclasses reads the class's module
            code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
            exec(code, module.__dict__)  # noqa: S102 - the peer's own definition, from its wheel
            cls = module.__dict__[name]
            assert isinstance(cls, type)
            return cls
    raise LookupError(f"{path} has no class {name!r} at module level")

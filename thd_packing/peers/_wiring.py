"""The wiring inventory every peer adapter states: what of the peer the suite drives.

Each adapter module has a `WIRING` mapping: every entry point of the peer that packs, pads,
shards, labels or bins (a function, method, collator or dataset packer, by its qualified name
in the installed wheel: `package.module.Name` or `package.module.Class.method`) to every
parameter of its signature (a class: its `__init__`, or a dataclass's fields), each with one
`Wire` (a parameter that is an object or a dict the peer reads fields or keys of may be listed
by those instead, as `param.field`: `args.fp8_recipe`, `examples.seq_lengths`):

- `wired(...)`: driven by the suite, from the protocol key, config field or input form named;
- `not_wired(...)`: changes the result, the suite never varies it; the reason names the rule or
  protocol key it would need, or why the adapter cannot drive it;
- `fixed(...)`: set to the one value the peer's own packing caller passes (another value leaves
  THD packing: a padded batch, another model family);
- `no_effect(...)`: does not change the pack (a tensor format, a logger, a name).

A *path* is one entry point x parameter row that changes the result (`wired` or `not_wired`);
*judged* paths are the `wired` rows (docs/findings/README.md). `tests/peers/test_wiring.py`
reads each entry point's signature from the installed wheel's file and fails where a parameter
is in neither list or a listed one is gone.
"""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path
from typing import NamedTuple

KINDS = ("wired", "not wired", "fixed", "no effect")
PATH_KINDS = ("wired", "not wired")  # the rows that change the result


class Wire(NamedTuple):
    kind: str  # one of KINDS
    note: str  # the protocol key / config field, or the reason


Wiring = dict[str, dict[str, Wire]]


def wired(name: str) -> Wire:
    """Driven by the suite: the protocol key, config field or input form `name`."""
    return Wire("wired", name)


def not_wired(reason: str) -> Wire:
    """Changes the result, not driven: `reason` names the rule it would need, or the gap."""
    return Wire("not wired", reason)


def fixed(reason: str) -> Wire:
    """The value the peer's own packing caller always passes, and why it is that one."""
    return Wire("fixed", reason)


def no_effect(reason: str) -> Wire:
    """Does not change the pack."""
    return Wire("no effect", reason)


def counts(wiring: Wiring) -> tuple[int, int]:
    """(judged, paths): the `wired` rows and the rows that change the result."""
    rows = [w for params in wiring.values() for w in params.values()]
    return (sum(w.kind == "wired" for w in rows), sum(w.kind in PATH_KINDS for w in rows))


def source_file(qualname: str) -> tuple[Path, list[str]]:
    """The installed file defining `qualname` and the names inside it (class, method), found
    on sys.path without importing the package (most peers' packages import a training stack)."""
    parts = qualname.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        rel = Path(*parts[:cut])
        for root in map(Path, sys.path):
            for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                if candidate.is_file():
                    return candidate, parts[cut:]
    raise LookupError(f"{qualname}: no installed file defines it")


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> list[str]:
    """The parameter names of `fn`, through inspect.signature of its bare definition."""
    args = fn.args
    bare = ast.arguments(
        posonlyargs=[ast.arg(a.arg) for a in args.posonlyargs],
        args=[ast.arg(a.arg) for a in args.args],
        vararg=ast.arg(args.vararg.arg) if args.vararg else None,
        kwonlyargs=[ast.arg(a.arg) for a in args.kwonlyargs],
        kw_defaults=[None if d is None else ast.Constant(None) for d in args.kw_defaults],
        kwarg=ast.arg(args.kwarg.arg) if args.kwarg else None,
        defaults=[ast.Constant(None) for _ in args.defaults])
    node = ast.FunctionDef(name="f", args=bare, body=[ast.Pass()], decorator_list=[],
                           returns=None)
    if sys.version_info >= (3, 12):
        node.type_params = []
    module = ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[]))
    namespace: dict[str, object] = {}
    exec(compile(module, "<signature>", "exec"), namespace)  # noqa: S102 - names only
    names = list(inspect.signature(namespace["f"]).parameters)  # type: ignore[arg-type]
    is_static = any(isinstance(d, ast.Name) and d.id == "staticmethod"
                    for d in fn.decorator_list)
    return names[1:] if method and not is_static and names else names


def _dataclass_fields(cls: ast.ClassDef) -> list[str]:
    out = []
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "ClassVar" not in ast.unparse(node.annotation):
                out.append(node.target.id)
    return out


def _is_dataclass(cls: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) for d in cls.decorator_list)


def parameters(qualname: str) -> list[str]:
    """The parameters of the installed `qualname`: a function's or method's, a class's
    `__init__`'s, else a dataclass's fields (read from the wheel's file, not imported)."""
    path, inner = source_file(qualname)
    scope: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    found: ast.AST | None = None
    for i, name in enumerate(inner):
        found = next((n for n in scope if isinstance(
            n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name), None)
        if found is None:
            raise LookupError(f"{qualname}: {path} has no {'.'.join(inner[:i + 1])}")
        scope = getattr(found, "body", [])
    if isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef):
        return _params(found, method=len(inner) > 1)
    assert isinstance(found, ast.ClassDef)
    init = next((n for n in found.body if isinstance(n, ast.FunctionDef)
                 and n.name == "__init__"), None)
    if init is not None:
        return _params(init, method=True)
    if not _is_dataclass(found):
        return []
    # a dataclass's fields: those of its dataclass bases in the same file first
    classes = {n.name: n for n in ast.parse(path.read_text(encoding="utf-8")).body
               if isinstance(n, ast.ClassDef)}
    fields: list[str] = []
    for base in found.bases:
        cls = classes.get(ast.unparse(base))
        if cls is not None and _is_dataclass(cls):
            fields += [f for f in _dataclass_fields(cls) if f not in fields]
    return fields + [f for f in _dataclass_fields(found) if f not in fields]


def problems(wiring: Wiring) -> list[str]:
    """Where `wiring` and the installed signatures disagree (empty: they agree)."""
    out = []
    for qualname, listed in wiring.items():
        for param, wire in listed.items():
            if not isinstance(wire, Wire) or wire.kind not in KINDS or not wire.note:
                out.append(f"{qualname}({param}): {wire!r} is not a Wire with a note")
        try:
            params = parameters(qualname)
        except LookupError as exc:
            out.append(str(exc))
            continue
        bases = {name.split(".")[0] for name in listed}
        out += [f"{qualname}: parameter {p!r} neither mapped nor listed"
                for p in params if p not in bases]
        out += [f"{qualname}: listed parameter {p!r} no longer exists"
                for p in sorted(bases) if p not in params]
    return out


def table(wiring: Wiring) -> str:
    """The findings page's wiring section: "judged: X of Y paths", then every row."""
    judged, paths = counts(wiring)
    lines = [f"judged: {judged} of {paths} paths ([what a path is](README.md#wiring)).", "",
             "| entry point | parameter | wiring |", "| --- | --- | --- |"]
    for qualname, listed in wiring.items():
        for param, wire in listed.items():
            lines.append(f"| `{qualname}` | `{param}` | {wire.kind}: {wire.note} |")
    return "\n".join(lines)


PAGE_START = ("<!-- wiring: generated from the adapter's WIRING "
              "(python -m thd_packing.peers._wiring) -->")
PAGE_END = "<!-- /wiring -->"


def write_page(page: Path, wiring: Wiring) -> None:
    """Put the wiring section right after the page's verdict paragraph (or replace it)."""
    text = page.read_text(encoding="utf-8")
    section = f"{PAGE_START}\n## Wiring\n\n{table(wiring)}\n{PAGE_END}\n"
    if PAGE_START in text:
        head, _, rest = text.partition(PAGE_START)
        text = head + section + rest.partition(PAGE_END + "\n")[2]
    else:
        start = text.index("**Verdict.**")
        end = text.index("\n\n", start) + 2
        text = text[:end] + section + "\n" + text[end:]
    page.write_text(text, encoding="utf-8")


PAGES = {"areal": "areal", "megatron_bridge": "megatron-bridge",
         "megatron_core": "megatron-core", "ms_swift": "ms-swift", "openrlhf": "openrlhf",
         "torchtitan": "torchtitan", "torchtune": "torchtune", "transformers": "transformers",
         "trl": "trl", "veomni": "veomni", "verl": "verl", "verl_fsdp": "verl-fsdp",
         # the binners (spec/bins.md), one page each
         "areal_bins": "bins-areal", "megatron_bridge_bins": "bins-megatron-bridge",
         "torchtune_bins": "bins-torchtune", "verl_bins": "bins-verl",
         "trl_bins": "bins-trl", "binpacking_bins": "bins-binpacking",
         "ms_swift_bins": "bins-ms-swift", "llamafactory_bins": "bins-llamafactory",
         "axolotl_bins": "bins-axolotl"}


def main() -> None:
    """Rewrite every findings page's wiring section from the adapters (run from the checkout)."""
    import importlib

    for module, page in PAGES.items():
        wiring = importlib.import_module(f"thd_packing.peers.{module}").WIRING
        write_page(Path("docs/findings") / f"{page}.md", wiring)


if __name__ == "__main__":
    main()

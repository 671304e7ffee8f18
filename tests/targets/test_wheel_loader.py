"""peers/_wheel.py: one function or one module of a wheel, without its package."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from thd_packing.peers import _wheel


def test_load_function_compiles_only_the_named_method(tmp_path: Path) -> None:
    # The file cannot be imported (its import fails); the one method is still loadable.
    src = tmp_path / "engine.py"
    src.write_text("import not_a_module_anywhere\n\nclass Engine:\n    @staticmethod\n"
                   "    def size(self, n):\n        return ceildiv(n, 4) * 4 - n\n")
    fn = _wheel.load_function(src, "size", {"ceildiv": lambda a, b: -(-a // b)}, "Engine")
    assert fn(None, 5) == 3
    assert fn.__code__.co_filename == str(src)
    assert fn.__code__.co_firstlineno == 5  # the wheel's own line numbers (decorator dropped)


def test_load_function_probe_fails_for_a_missing_definition(tmp_path: Path) -> None:
    src = tmp_path / "engine.py"
    src.write_text("class Engine:\n    def other(self):\n        return 1\n")
    with pytest.raises(LookupError, match="size"):
        _wheel.load_function(src, "size", {}, "Engine")
    assert _wheel.find_method_owner(src, "other") == "Engine"
    assert _wheel.find_method_owner(src, "size") is None


def test_exec_file_removes_its_stubs_again(tmp_path: Path) -> None:
    src = tmp_path / "mod.py"
    src.write_text("from fakepkg.sub import VALUE\nDOUBLE = 2 * VALUE\n")
    stubs = {"fakepkg": _wheel.stub_module("fakepkg", package=True),
             "fakepkg.sub": _wheel.stub_module("fakepkg.sub", {"VALUE": 21},
                                               callables=("never",))}
    module = _wheel.exec_file(src, "_private_mod", stubs)
    assert module.DOUBLE == 42
    assert "fakepkg" not in sys.modules and "fakepkg.sub" not in sys.modules
    with pytest.raises(RuntimeError, match="fakepkg.sub.never"):
        stubs["fakepkg.sub"].never()


def test_locate_names_the_install_command() -> None:
    with pytest.raises(RuntimeError, match="pip install it"):
        _wheel.locate("no-such-distribution-xyz", "a.py", "pip install it")


def test_exec_file_runs_a_file_that_defines_a_dataclass(tmp_path: Path) -> None:
    # dataclasses looks the class's module up in sys.modules while the file runs (VeOmni's
    # data_collator.py defines its collators so).
    src = tmp_path / "collate.py"
    src.write_text("from dataclasses import dataclass\n\n@dataclass\nclass Info:\n"
                   "    dim: int = 0\n")
    module = _wheel.exec_file(src, "_private_collate", {})
    assert module.Info(3).dim == 3
    assert sys.modules["_private_collate"] is module


def test_load_class_compiles_only_the_named_class(tmp_path: Path) -> None:
    # The file cannot be imported; the one dataclass is still loadable, decorator kept.
    src = tmp_path / "trainer.py"
    src.write_text("import not_a_module_anywhere\n\n@dataclass\nclass Collator(Base):\n"
                   "    pad: int\n\n    def call(self, n):\n        return helper(n) + self.pad\n")
    base = type("Base", (), {})
    cls = _wheel.load_class(src, "Collator", {"dataclass": dataclasses.dataclass, "Base": base,
                                               "helper": lambda n: 2 * n})
    assert issubclass(cls, base) and dataclasses.is_dataclass(cls)
    assert cls(pad=1).call(5) == 11
    assert cls.call.__code__.co_filename == str(src)
    assert cls.call.__code__.co_firstlineno == 7  # the wheel's own line numbers
    with pytest.raises(LookupError, match="Other"):
        _wheel.load_class(src, "Other", {})

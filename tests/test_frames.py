"""Which function of a source file holds a line (capture/frames.py): read past decorators,
found inside classes, branches, handlers, ``with`` and ``match`` blocks; which imported
modules a source file is."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from neuronscope.capture.frames import function_of, modules_of

SOURCE = '''\
import torch

x = 1                              # 3: module level


class Block:
    def forward(self, h):          # 7
        if h is None:
            def fallback(v):       # 9
                return v           # 10
        try:
            pass
        except ValueError:
            async def handler():   # 14
                pass               # 15
        with open(__file__):
            match h:
                case 1:
                    def matched(): # 19
                        return 1   # 20
        g = lambda v: v * 2        # 21: a lambda is no def: the forward's line
        return h                   # 22
'''


def test_function_of_names_the_innermost_def_wherever_it_is_nested(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(SOURCE)
    where = {line: function_of(str(path), line) for line in (3, 7, 8, 10, 15, 20, 21, 22)}
    assert where == {3: None, 7: 7, 8: 7, 10: 9, 15: 14, 20: 19, 21: 7, 22: 7}
    assert function_of(str(tmp_path / "missing.py"), 3) is None


def test_modules_of_finds_a_file_by_its_import_name_and_under_any_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file imported from a sys.path folder is found by the name that folder gives it (a
    package's ``__init__`` by the package's); one loaded under a name of its own, by a scan of
    every module; a file no module was loaded from, nowhere."""
    package = tmp_path / "ns_p39_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "layer.py").write_text("class Layer:\n    pass\n")
    (tmp_path / "loose.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("ns_p39_pkg", "ns_p39_pkg.layer"):  # removed again after the test
        monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.delitem(sys.modules, name)
    layer = importlib.import_module("ns_p39_pkg.layer")
    assert modules_of(str(package / "layer.py")) == [layer]
    assert modules_of(str(package / "__init__.py")) == [sys.modules["ns_p39_pkg"]]
    spec = importlib.util.spec_from_file_location("ns_p39_loose", tmp_path / "loose.py")
    assert spec is not None and spec.loader is not None
    loose = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loose)
    monkeypatch.setitem(sys.modules, "ns_p39_loose", loose)
    assert modules_of(str(tmp_path / "loose.py")) == [loose]  # not a name sys.path gives it
    assert modules_of(str(tmp_path / "absent.py")) == []

"""Which function of a source file holds a line (capture/frames.py): read past decorators,
found inside classes, branches, handlers, ``with`` and ``match`` blocks."""

from __future__ import annotations

from pathlib import Path

from neuronscope.capture.frames import function_of

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

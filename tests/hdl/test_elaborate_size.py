"""Every block's ``elaborate`` stays short enough to hold in one's head.

A block whose ``elaborate`` grows past :data:`MAX_LINES` is split: into private
methods, or into components of its own where the block separates
(``hdl/checkpoint/scanner.py`` and the components it is made of show how).
"""

import ast
from pathlib import Path

import trainingcxl.hdl

#: The most lines an ``elaborate`` of ``hdl/`` may span, its ``def`` line to its last.
MAX_LINES = 200

HDL = Path(trainingcxl.hdl.__file__).resolve().parent


def elaborate_lengths(root=HDL):
    """``{"file:Class.elaborate": lines}`` for every ``elaborate`` method under ``root``."""
    lengths = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            for node in cls.body:
                if isinstance(node, ast.FunctionDef) and node.name == "elaborate":
                    where = f"{path.relative_to(root)}:{cls.name}.elaborate"
                    lengths[where] = node.end_lineno - node.lineno + 1
    return lengths


def test_elaborate_methods_are_found():
    lengths = elaborate_lengths()
    assert "top.py:Device.elaborate" in lengths
    assert len(lengths) > 30


def test_no_elaborate_over_max_lines():
    long = {where: n for where, n in elaborate_lengths().items() if n > MAX_LINES}
    assert not long, f"elaborate over {MAX_LINES} lines (split it): {long}"

"""The key of cached Verilog and simulator builds covers every module the gateware imports.

The key is computed from the import graph of the simulation tops (see
``trainingcxl.sim.import_graph``); an edit of any module they import, in any
folder, must give a new key (a rebuild), and an edit of a module they do not
import must not.
"""

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainingcxl.sim import import_graph
from trainingcxl.sim.runner import (GATEWARE_ROOTS, PRUNE_AFTER_S, build_key, design_key,
                                    gateware_modules)
from trainingcxl.spec.presets import PRESETS

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("spec", "hdl", "sim", "host", "boards")


def test_key_covers_the_specification_and_no_host_or_bench_module():
    modules = gateware_modules()
    for name in ("trainingcxl.spec.config", "trainingcxl.spec.records",
                 "trainingcxl.spec.registers", "trainingcxl.spec.bridge_protocol",
                 "trainingcxl.spec.host_layout", "trainingcxl.spec.descriptors",
                 "trainingcxl.hdl.control", "trainingcxl.hdl.top", "trainingcxl.hdl.export",
                 "trainingcxl.hdl.bridge.system", "trainingcxl.hdl", "trainingcxl.spec",
                 "trainingcxl.sim.rtl.top", "trainingcxl.sim.rtl.host_memory"):
        assert name in modules, name
    # Of the harness only its simulation-only gateware (sim/rtl/) is in a design.
    strays = [m for m in modules if m.startswith("trainingcxl.host")
              or (m.startswith("trainingcxl.sim.") and not m.startswith("trainingcxl.sim.rtl"))]
    assert not strays, strays
    assert all(path.is_file() and path.suffix == ".py" for path in modules.values())
    # Every module of hdl/ the tops import is covered, and only the formal harnesses
    # (not part of a simulation) are left out.
    hdl = {m for m in import_graph.all_modules() if m.startswith("trainingcxl.hdl")}
    assert hdl - set(modules) == {m for m in hdl if m.startswith("trainingcxl.hdl.formal")}


def test_key_keeps_its_shape():
    config = PRESETS["tiny"]
    key = design_key(config)
    assert key.startswith(config.hardware_digest() + "-") and key == design_key(config)
    assert build_key("verilator", config).startswith(key + "-")
    assert build_key("verilator", config) != build_key("icarus", config)
    assert design_key(PRESETS["tiny"].replace(dim=32)) != key


def test_module_imports_reports_line_numbers():
    imports = import_graph.module_imports("trainingcxl.hdl.bridge.system")
    assert ("trainingcxl.spec.bridge_protocol", _line_of("hdl/bridge/system.py",
                                                         "spec.bridge_protocol")) in imports
    assert "trainingcxl.hdl.top" in import_graph.imports_of("trainingcxl.hdl.bridge.system")
    assert not any(m.startswith("amaranth") for m, _ in imports)


def _line_of(path, text):
    lines = (REPO / path).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_import_graph_follows_every_form_of_import(tmp_path, monkeypatch):
    """Relative and absolute imports, imports inside functions, ``from package import
    submodule``, ``importlib.import_module`` with a literal, and the packages above."""
    files = {
        "gwpkg/__init__.py": "",
        "gwpkg/top.py": """
            import os
            from .a import thing
            from gwpkg import b, c
            import gwpkg.sub.d
            def build():
                from .sub import e
                import importlib
                return importlib.import_module("gwpkg.f")
            """,
        "gwpkg/a.py": "thing = 1\n",
        "gwpkg/b.py": "from .sub.g import G\n",
        "gwpkg/c.py": "",
        "gwpkg/f.py": "",
        "gwpkg/unused.py": "import gwpkg.top\n",
        "gwpkg/sub/__init__.py": "from .. import a\n",
        "gwpkg/sub/d.py": "",
        "gwpkg/sub/e.py": "",
        "gwpkg/sub/g.py": "G = 2\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    found = import_graph.project_modules(["gwpkg.top"], package="gwpkg")
    assert sorted(found) == ["gwpkg", "gwpkg.a", "gwpkg.b", "gwpkg.c", "gwpkg.f", "gwpkg.sub",
                             "gwpkg.sub.d", "gwpkg.sub.e", "gwpkg.sub.g", "gwpkg.top"]
    assert found["gwpkg.sub.g"] == tmp_path / "gwpkg/sub/g.py"
    assert import_graph.module_imports("gwpkg.top", package="gwpkg") == [
        ("gwpkg.a", 3), ("gwpkg.b", 4), ("gwpkg.c", 4), ("gwpkg.sub.d", 5),
        ("gwpkg.sub.e", 7), ("gwpkg.f", 9)]
    assert import_graph.imports_of("gwpkg.sub", package="gwpkg") == {"gwpkg.a"}
    assert "gwpkg.unused" in import_graph.all_modules("gwpkg")
    assert "gwpkg" not in sys.modules       # nothing was imported


# -- the stale-build test, on a scratch copy of the sources --------------------------------

_PROBE = """
import json, sys
from pathlib import Path
from trainingcxl.sim import runner
from trainingcxl.spec.presets import PRESETS
root = Path(sys.argv[1])
assert Path(runner.__file__).is_relative_to(root), runner.__file__
config = PRESETS["tiny"]
modules = runner.gateware_modules()
assert all(p.is_relative_to(root) for p in modules.values()), modules
out = {"key": runner.design_key(config), "build": runner.build_key("verilator", config),
       "modules": sorted(modules)}
if sys.argv[2] != "key":
    if sys.argv[2] == "stub":           # stands in for a conversion: only the caching is tested
        import trainingcxl.hdl.export
        trainingcxl.hdl.export.convert = lambda top, name, models=None: "// converted\\n"
    logs = []
    first = runner.verilog_for(config, log=logs.append)
    again = runner.verilog_for(config, log=logs.append)
    out.update(verilog=str(first), same=first == again,
               # the line a conversion starts with (a slow one adds lines every 30 s)
               conversions=sum("converting the" in line for line in logs),
               files=sorted(p.name for p in first.parent.iterdir()))
print(json.dumps(out))
"""


@pytest.fixture
def scratch(tmp_path):
    """A copy of the package's sources that ``trainingcxl`` resolves to in a subprocess."""
    copy = tmp_path / "copy"
    for folder in FOLDERS:
        shutil.copytree(REPO / folder, copy / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")
    package = tmp_path / "path" / "trainingcxl"
    package.mkdir(parents=True)
    for folder in FOLDERS:
        (package / folder).symlink_to(copy / folder, target_is_directory=True)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "path"),
               TRAININGCXL_CACHE=str(tmp_path / "cache"))

    def probe(mode="key"):
        done = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "path"), mode],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.splitlines()[-1])

    def edit(path, old, new):
        path = copy / path
        text = path.read_text()
        assert old in text, (path, old)
        path.write_text(text.replace(old, new, 1))

    return probe, edit, copy


@pytest.mark.slow
def test_an_edit_of_any_module_the_gateware_imports_rebuilds(scratch):
    probe, edit, copy = scratch
    base = probe("convert")
    assert base["conversions"] == 1 and base["same"]        # the second call reuses the file
    assert probe("convert")["conversions"] == 0             # so does another process
    keys = [base["key"]]
    builds = [base["build"]]

    def changed(what):
        now = probe()
        assert now["key"] not in keys, f"{what} left the key at {now['key']}: a stale build"
        assert now["build"] not in builds, what
        keys.append(now["key"])
        builds.append(now["build"])
        return now

    # Constants of the specification the gateware is built from (not Config fields).
    edit("spec/bridge_protocol.py", "BOARD_MAGIC = 0x42584354", "BOARD_MAGIC = 0x42584355")
    changed("BOARD_MAGIC")
    edit("spec/records.py", "CRC_INIT = 0xFFFFFFFF", "CRC_INIT = 0xFFFFFFFE")
    changed("CRC_INIT")
    # A module outside hdl/ and spec/ that the gateware starts to import (relatively,
    # inside a function, as `from package import submodule`), then an edit of it.
    (copy / "host" / "gateware_constant.py").write_text("WIDTH = 3\n")
    edit("hdl/control.py", '__all__ = ["ControlBusSignature", "ControlWindow"]\n',
         '__all__ = ["ControlBusSignature", "ControlWindow"]\n\n\n'
         'def _width():\n    from ..host import gateware_constant\n'
         '    return gateware_constant.WIDTH\n')
    assert "trainingcxl.host.gateware_constant" in changed("an import")["modules"]
    edit("host/gateware_constant.py", "WIDTH = 3", "WIDTH = 4")
    changed("an edit of a host module the gateware imports")
    # A module the gateware does not import: no rebuild.
    edit("host/model/golden.py", '"""', '"""Edited. ', )
    assert probe()["key"] == keys[-1]

    after = probe("stub")
    assert after["conversions"] == 1 and after["verilog"] != base["verilog"]
    # The Verilog of the older sources was used within the hour: another checkout sharing
    # the cache may still run on it, so it is kept ...
    assert after["files"] == sorted([Path(base["verilog"]).name, Path(after["verilog"]).name])
    # ... until it has not been used for PRUNE_AFTER_S.
    for name in after["files"]:
        path = Path(after["verilog"]).parent / name
        os.utime(path, (path.stat().st_atime, path.stat().st_mtime - PRUNE_AFTER_S - 60))
    edit("spec/records.py", "CRC_INIT = 0xFFFFFFFE", "CRC_INIT = 0xFFFFFFFD")
    last = probe("stub")
    assert last["files"] == [Path(last["verilog"]).name]


def test_a_build_stopped_part_way_is_started_afresh(tmp_path, monkeypatch):
    """A build folder without its stamp (a build killed part-way, perhaps in another
    checkout whose paths its makefiles name) is emptied before the next build."""
    from trainingcxl.sim import runner
    bdir = tmp_path / "verilator-partial"
    bdir.mkdir()
    (bdir / "Vtop.mk").write_text("VM_USER_CLASSES = /a/checkout/that/is/gone/crc32c\n")
    seen = []

    class FakeRunner:
        def build(self, *, build_dir, log_file, **kw):
            seen.append(sorted(p.name for p in Path(build_dir).iterdir()))
            Path(log_file).write_text("built")

    monkeypatch.setattr(runner, "_runner", lambda sim: FakeRunner())
    monkeypatch.setattr(runner, "_prune_stale", lambda *a: None)
    runner._compile("verilator", PRESETS["tiny"], "device", tmp_path / "x.v", bdir, False,
                    lambda text: None)
    assert seen == [[]], "the stopped build's files were still there"
    assert (bdir / ".built").exists()

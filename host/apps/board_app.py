"""Training on the simulated board top through its UART pins: the job behind
``trainingcxl train --target sim-board``.

The host side is exactly the one that drives a real board
(:class:`~trainingcxl.host.driver.bridge.BoardDevice`,
:func:`~trainingcxl.host.protocol.board.board_training`); only the transport
differs: :class:`~trainingcxl.sim.board_uart.UartPins` instead of a serial port.

The job is a :class:`~trainingcxl.host.jobs.BoardJob`.
"""

import json
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer

from trainingcxl.host.driver.bridge import BoardDevice, BridgeClient
from trainingcxl.host.protocol.board import BoardFailures, board_training
from trainingcxl.host.model.data import SyntheticWorkload
from trainingcxl.sim.board_uart import UartPins
from trainingcxl.sim.backdoor import SdramLines
from trainingcxl.sim.rtl.sdram_model import Violation
from trainingcxl.sim.bench_env import PERIOD_NS, bench_config
from trainingcxl.host.jobs import BoardJob
from .launch import read_job
from trainingcxl.sim.runner import BOARD_SIM_DIVISOR
from trainingcxl.host.protocol.training import progress


class _ButtonPresses(BoardFailures):
    """Presses the board's button at the start of the listed batches (once each)."""

    def __init__(self, *args, dut, presses, **kwargs):
        super().__init__(*args, **kwargs)
        self.dut, self.presses = dut, set(presses)

    async def before_batch(self, run, batch):
        if batch in self.presses:
            self.presses.discard(batch)
            self.dut.button.value = 1
            await Timer(64 * PERIOD_NS, "ns")       # held past the debouncer
            self.dut.button.value = 0
            await Timer(64 * PERIOD_NS, "ns")
        await super().before_batch(run, batch)


@cocotb.test()
async def board_job(dut):
    cfg = bench_config()
    job, out_path = read_job(BoardJob)
    Clock(dut.clk, PERIOD_NS, unit="ns").start()
    dut.button.value = 0
    dut.rx.value = 1
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    uart = UartPins(dut, divisor=BOARD_SIM_DIVISOR, period_ns=PERIOD_NS)
    client = BridgeClient(uart)
    device = BoardDevice(client, cfg)
    if cfg.media == "sdram":
        # Tables go into the chip model and come back from it directly (a board moves
        # them over the UART): a table of 100,000 rows would take billions of cycles.
        device.transport.media = SdramLines.open(cfg.sdram)
    batch_size = cfg.model.batch_size if job.batch_size is None else job.batch_size
    data = SyntheticWorkload(cfg, seed=job.seed, batch_size=batch_size)
    batches = job.batches
    failures = [tuple(f) for f in job.failures]
    await device.check_identity()
    run = board_training(device, data, batches=batches, seed=job.seed,
                         staleness=job.staleness, failures=failures,
                         log=(lambda text: None) if job.quiet else progress,
                         failure_source=_ButtonPresses(failures, batches=batches, dut=dut,
                                                       presses=job.button))
    wall0 = time.perf_counter()
    record = await run.run()
    record.counters = run.counters
    record.bridge = await client.state()
    record.frames = client.frames
    record.uart_framing_errors = uart.framing_errors
    # The SDRAM chip model's verdict (a board whose media is in block RAM has none).
    violation = Violation(int(dut.sdram_violation.value))
    record.sdram_violation = violation.name
    record.golden_match = record.consistent and not record.errors and violation == Violation.NONE
    record.wall_s = time.perf_counter() - wall0
    with open(out_path, "w") as f:
        json.dump(record.to_dict(), f, indent=2, default=str)
    assert violation == Violation.NONE, f"the SDRAM controller broke a rule: {violation.name}"
    assert record.golden_match, "the board diverged from the golden model (see the progress lines)"

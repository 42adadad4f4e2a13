"""The simulated board top driven through its UART pins by the board's host driver.

The host side is the code that drives a real board over a serial port
(``host/driver/bridge.py``, ``host/protocol/board.py``); only the transport is the
simulated pins (``sim/board_uart.py``).
"""


import pytest

from trainingcxl.boards.targets import BOARDS
from trainingcxl.sim.runner import board_top
from trainingcxl.host.apps.launch import launch
from trainingcxl.host.jobs import BoardJob

pytestmark = pytest.mark.cocotb


def _train(sim, name, tmp_path, **args):
    """Train on board ``name``'s top, at the clock its build runs at."""
    board = BOARDS[name]
    cfg = board.config
    job = BoardJob(seed=0, batch_size=cfg.model.batch_size, quiet=True).replace(**args)
    return launch(job, cfg, sim=sim, top=board_top(board.clock_mhz), name=f"board-{name}-{sim}",
                  work_dir=tmp_path).to_dict()


def test_board_trains_and_recovers_from_a_command_and_a_button_power_failure(tmp_path):
    """ULX3S device at its build's clock, tables of 100,000 rows in the board's SDRAM (the
    simulated top carries the chip model, which checks every timing rule): a POWER_FAIL
    command in batch 2's update, the button at batch 3's start; both recovered, training
    matches the golden model bit for bit, and the PMEM timing held on top of the SDRAM's."""
    cfg = BOARDS["ulx3s"].config
    assert sum(cfg.tables) >= 100_000 and cfg.media == "sdram"
    rec = _train("verilator", "ulx3s", tmp_path, batches=4, failures=[[2, "update"]], button=[3])
    assert rec["golden_match"] and rec["pooled_mismatches"] == 0
    assert rec["sdram_violation"] == "NONE" and rec["counters"]["media_late"] == 0
    assert rec["checks"][-1]["tables_match"]
    assert len(rec["loss"]) == 4
    first, second = rec["failures"]
    assert first["cause"] == "POWER_FAIL command in update of batch 2"
    assert first["recovered_batch"] == 1 and first["rolled_back"] > 0
    assert second["cause"] == "the board's button" and second["batch"] == 3
    assert second["recovered_batch"] == 2
    for f in rec["failures"]:
        assert f["consistent"] and all(f["invariants"].values())
    bridge = rec["bridge"]
    assert bridge["command_power_fails"] == 1 and bridge["button_power_fails"] == 1
    assert bridge["bad_frames"] == 0 and rec["uart_framing_errors"] == 0


@pytest.mark.parametrize("sim", ["verilator", "icarus"])
def test_small_board_pools_on_chip_and_updates_from_the_host(sim, tmp_path):
    """ULX3S-12F device (lookup engine only): pooled vectors and tables bit-exact."""
    rec = _train(sim, "ulx3s-12f", tmp_path, batches=2 if sim == "verilator" else 1)
    assert rec["golden_match"] and rec["pooled_mismatches"] == 0
    assert rec["checks"][-1]["tables_match"] and not rec["failures"]

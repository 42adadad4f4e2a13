"""The protocol's runtimes and failure sources, without a simulator."""

import pytest

from trainingcxl.host.driver.bridge import BoardDevice
from trainingcxl.host.model.data import SyntheticWorkload
from trainingcxl.host.protocol.board import BoardFailures, UntimedRuntime, board_training
from trainingcxl.host.protocol.systems import LOOKUP_ONLY, SYSTEMS
from trainingcxl.host.protocol.training import TrainingRun
from trainingcxl.spec.presets import PRESETS


def _run(cfg, *, system, relaxed):
    device = BoardDevice(client=None, config=cfg)
    data = SyntheticWorkload(cfg, seed=0, batch_size=cfg.model.batch_size)
    return TrainingRun(device, data, system=system, runtime=UntimedRuntime(),
                       failures=BoardFailures(batches=2), batches=2, seed=0, staleness=0,
                       relaxed=relaxed)


def test_an_untimed_runtime_refuses_relaxed_order():
    cfg = PRESETS["tiny"]
    with pytest.raises(ValueError, match="runs one thing at a time"):
        _run(cfg, system=SYSTEMS["cxl"], relaxed=True)
    assert not _run(cfg, system=SYSTEMS["cxl-b"], relaxed=False).relaxed


def test_a_board_run_follows_the_devices_blocks():
    data = SyntheticWorkload(PRESETS["ulx3s"], seed=0, batch_size=16)
    full = board_training(BoardDevice(None, PRESETS["ulx3s"]), data, batches=2,
                          failures=[(1, "update")])
    assert full.system is SYSTEMS["cxl-b"] and full.checkpointing
    small = board_training(BoardDevice(None, PRESETS["ulx3s-12f"]),
                           SyntheticWorkload(PRESETS["ulx3s-12f"], seed=0, batch_size=8), batches=2)
    assert small.system is LOOKUP_ONLY and not small.checkpointing
    with pytest.raises(ValueError, match="no checkpoint engine"):
        board_training(BoardDevice(None, PRESETS["ulx3s-12f"]), data, batches=2,
                       failures=[(1, "update")])
    with pytest.raises(ValueError, match="a board failure phase is one of"):
        BoardFailures([(1, "gpu")], batches=2)

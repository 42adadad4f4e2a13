"""Fixtures of the protocol's tests: a training run over the fake device, in seconds."""

import asyncio

import pytest

from fake_device import FakeDevice
from fake_host import FakeFailures, FakeRuntime
from trainingcxl.host.model.data import SyntheticWorkload
from trainingcxl.host.protocol.systems import system
from trainingcxl.host.protocol.training import TrainingRun
from trainingcxl.spec.presets import PRESETS


class FakeTraining:
    """A finished run over a :class:`FakeDevice`: ``record`` (what the run reports),
    ``device`` (its trace and media), ``run`` (the :class:`TrainingRun`)."""

    def __init__(self, run, record, device):
        self.run, self.record, self.device = run, record, device

    @property
    def trace(self):
        return self.device.trace

    def tables(self):
        return asyncio.run(self.device.read_tables())

    def at(self, what, batch, **info):
        """Where in the trace the first event ``what`` of ``batch`` with ``info`` is (a
        submitted operation's name, or ``"done"`` with ``op=``); ``None`` if nowhere."""
        for i, e in enumerate(self.trace):
            if e.what == what and e.batch == batch and all(e.info.get(k) == v
                                                           for k, v in info.items()):
                return i
        return None

    def done(self, op, batch):
        """The completion of ``op`` of ``batch``: ``(where, error name)``."""
        i = self.at("done", batch, op=op)
        return i, None if i is None else self.trace[i].info["error"]


@pytest.fixture
def fake_training():
    """``fake_training(name, batches=..., failures=[...], staleness=None, relaxed=None,
    defer_depth=None, pull_cycles=300, config="tiny")``: train ``batches`` batches of
    the ladder's system ``name`` on a fake device and return a :class:`FakeTraining`.
    ``staleness`` and ``relaxed`` default to the system's; ``config`` is a preset's name
    or a configuration, ``min_pooling`` the synthetic data's smallest bag."""

    def train(name, *, batches=6, failures=(), staleness=None, relaxed=None, defer_depth=None,
              pull_cycles=300, config="tiny", min_pooling=0, **kwargs):
        cfg = PRESETS[config] if isinstance(config, str) else config
        sysm = system(name)
        device = FakeDevice(cfg, pull_cycles=pull_cycles, defer_depth=defer_depth)
        data = SyntheticWorkload(cfg, seed=0, batch_size=cfg.model.batch_size,
                                 min_pooling=min_pooling)
        run = TrainingRun(device, data, system=sysm, runtime=FakeRuntime(device),
                          failures=FakeFailures(device, failures), batches=batches, seed=0,
                          staleness=sysm.staleness if staleness is None else staleness,
                          relaxed=sysm.relaxed if relaxed is None else relaxed,
                          check_every=1, **{"log": lambda text: None, **kwargs})
        record = asyncio.run(run.run())
        return FakeTraining(run, record, device)

    return train

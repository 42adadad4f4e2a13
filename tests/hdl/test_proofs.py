"""The formal proofs (``trainingcxl formal``): each must pass, and a broken block must fail."""

import pytest
from amaranth import Module

from trainingcxl.hdl.checkpoint.logger import UndoLogger
from trainingcxl.hdl.common.register_slice import RegisterSlice
from trainingcxl.hdl.formal import proofs
from trainingcxl.hdl.formal.streams import StreamContract
from trainingcxl.hdl.formal.write_ahead import LoggerHarness
from trainingcxl.sim.formal import PROOFS, Proof, run_proof

pytestmark = pytest.mark.formal


@pytest.mark.parametrize("name", list(PROOFS))
def test_proof_passes(name, tmp_path):
    result = run_proof(name, work=tmp_path)
    assert result["status"] == "PASS", result


class _DroppingSlice(RegisterSlice):
    """A slice that takes a new payload even while its output waits."""

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(1)
        m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload)]
        return m


def test_a_block_that_breaks_the_stream_rule_fails(tmp_path, monkeypatch):
    broken = Proof("broken-slice", "a slice that drops payloads",
                   lambda: StreamContract(_DroppingSlice(proofs._Small)), 6)
    monkeypatch.setitem(PROOFS, "broken-slice", broken)
    result = run_proof("broken-slice", work=tmp_path)
    assert result["status"] == "FAIL"
    assert "o: valid or payload changed before ready" in result["assertion"]
    assert result["trace"].endswith(".vcd")


class _EagerLogger(UndoLogger):
    """A logger that says drained while nothing new comes in, whatever it still holds."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.sync += self.drained.eq(~self.tap.take & ~self.tap.lines.valid & ~self.pmem.req.valid)
        return m


def test_a_logger_drained_too_early_fails(tmp_path, monkeypatch):
    cfg = proofs.formal_config().replace(tables=(2,))
    broken = Proof("eager-logger", "a logger drained before its records persist",
                   lambda: LoggerHarness(cfg, logger=_EagerLogger), 9)
    monkeypatch.setitem(PROOFS, "eager-logger", broken)
    result = run_proof("eager-logger", work=tmp_path)
    assert result["status"] == "FAIL"
    assert "drained with" in result["assertion"]

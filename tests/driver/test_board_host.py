"""The board's host side without hardware: bridge client, failure options, register helpers."""

import argparse
import asyncio

import pytest

from trainingcxl.spec.descriptors import Op
from trainingcxl.spec.registers import REG, Reg, constants
from trainingcxl.host.driver.bridge import BridgeClient, BridgeError
from trainingcxl.host.commands.train_targets import board_failures
from trainingcxl.host.protocol.phases import BOARD_PHASES
from trainingcxl.spec.bridge_protocol import Command, FrameError, Status, crc8, encode_request
from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.driver.device import Device
from trainingcxl.host.tools.plans import parse_fail_in
from trainingcxl.spec.host_layout import HostLayout


def response(status, payload):
    body = bytes([status]) + payload
    return bytes([0xA5]) + body + bytes([crc8(body)])


class ScriptedTransport:
    """Answers each request with the next scripted response; records what was sent."""

    def __init__(self, responses):
        self.responses = list(responses)
        self.sent, self.pending, self.resyncs = [], b"", 0

    async def send(self, data):
        self.sent.append(bytes(data))
        self.pending += self.responses.pop(0)

    async def recv(self, n):
        if len(self.pending) < n:
            raise TimeoutError("nothing more to read")
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    async def resync(self):
        self.resyncs += 1
        self.pending = b""

    async def pause(self):
        pass


def test_client_reads_a_register_and_retries_a_damaged_response():
    good = response(Status.OK, (0x1234).to_bytes(8, "little"))
    damaged = good[:-1] + bytes([good[-1] ^ 0x55])
    t = ScriptedTransport([damaged, good])
    client = BridgeClient(t)
    assert asyncio.run(client.read_reg(Reg.COMPLETED)) == 0x1234
    assert t.sent == [encode_request(Command.REG_READ, bytes([Reg.COMPLETED]))] * 2
    assert t.resyncs == 1 and client.frames == 1


def test_client_raises_the_bridges_error_status_and_gives_up_on_garbage():
    t = ScriptedTransport([response(Status.REG_ERROR, bytes(8))])
    with pytest.raises(BridgeError, match="REG_READ answered REG_ERROR") as e:
        asyncio.run(BridgeClient(t).read_reg(0xEE))
    assert e.value.status == Status.REG_ERROR
    junk = bytes(11)
    with pytest.raises(FrameError):
        asyncio.run(BridgeClient(ScriptedTransport([junk] * 3)).read_reg(Reg.ID))


def _args(**kw):
    base = {"fail_at": [], "fail_in": [], "inject_failures": 0, "seed": 0, "failure_seed": None,
            "kill_in": [], "pmem": None}
    return argparse.Namespace(**{**base, **kw})


def test_board_failure_options():
    assert board_failures(_args(fail_in=[parse_fail_in("update@2")]), 5, BOARD_PHASES) == [(2, "update")]
    drawn = board_failures(_args(inject_failures=3, failure_seed=4), 5, BOARD_PHASES)
    assert len(drawn) == 3 and all(1 <= b <= 5 and p in BOARD_PHASES for b, p in drawn)
    for bad in (_args(fail_at=[100]), _args(fail_in=[parse_fail_in("gpu@1")]),
                _args(fail_in=[parse_fail_in("update@9")]),
                _args(fail_in=[parse_fail_in("update@1+5")]),
                _args(fail_in=[parse_fail_in("commit@1"), parse_fail_in("commit@1")]),
                _args(kill_in=[parse_fail_in("update@1")]), _args(pmem="run.pmem"),
                _args(devices=2)):
        with pytest.raises(SystemExit):
            board_failures(bad, 5, BOARD_PHASES)


class FakeTransport:
    """Registers from a dict; records every write (the driver's view of a device)."""

    interrupts = False

    def __init__(self, regs=None):
        self.regs, self.writes = dict(regs or {}), []

    async def read_reg(self, reg):
        return self.regs.get(Reg(reg), 0)

    async def write_reg(self, reg, value):
        self.writes.append((Reg(reg), value))
        self.regs[Reg(reg)] = value


def test_the_driver_encodes_and_decodes_registers_from_the_specification():
    cfg = PRESETS["ulx3s"]
    assert REG.GEOMETRY.decode(constants(cfg)["GEOMETRY"])["tables"] == 2
    t = FakeTransport({Reg.CKPT_STATE: 0b1011 | 3 << 8 | 5 << 16 | 9 << 32,
                       Reg.COMMITTED: 1 << 32 | 4, Reg.SNAPSHOT: 2, Reg.DURABLE: 0})
    dev = Device(t, cfg)
    st = asyncio.run(dev.checkpoint_state())
    assert st["ready"] and st["logging"] and st["snapshot_failed"] and not st["snapshot_busy"]
    assert (st["staleness"], st["gen"], st["live_records"]) == (3, 5, 9)
    assert (st["committed"], st["snapshot"], st["durable"]) == (4, None, None)
    asyncio.run(dev.submit(Op.UPDATE, 7, n_bags=3, n_indices=5, idx_addr=64, off_addr=128,
                           vec_addr=192, coalesced=True))
    assert t.writes[:2] == [(Reg.DESC_OP, Op.UPDATE.value | 1 << 10 | 7 << 32),
                            (Reg.DESC_SIZE, 3 | 5 << 32)]
    assert t.writes[-1] == (Reg.DOORBELL, 1)


def test_the_host_layout_fits_its_window():
    cfg = PRESETS["ulx3s"]
    lay = HostLayout(cfg)
    # Two slots, deltas, the MLP copy: every region inside the window, none overlapping.
    assert lay.mlp_line + cfg.mlp_lines == lay.base + lay.lines
    assert lay.idx_lines[1] > lay.out_lines[0] and lay.delta_line > lay.out_lines[1]
    assert lay.base in lay and lay.base + lay.lines not in lay


def test_the_gpu_window_covers_the_host_layout_and_only_where_the_device_has_one():
    for name, cfg in (*((n, PRESETS[n]) for n in ("ulx3s", "ulx3s-12f", "tiny")),
                      ("without", PRESETS["ulx3s-12f"].replace(gpu_window=False))):
        t = FakeTransport()
        dev = Device(t, cfg)
        asyncio.run(dev.set_gpu_window())
        writes = dict(t.writes)
        lay = dev.layout
        if not cfg.gpu_window:
            assert writes == {}, f"{name}: writes registers the device does not have"
            continue
        assert writes == {Reg.GPU_BASE: lay.base * 64, Reg.GPU_LIMIT: (lay.base + lay.lines) * 64}

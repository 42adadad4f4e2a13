"""The host bridge: UART frames to control-window, CXL.mem and host-window accesses."""

from amaranth import *
from amaranth.lib import enum, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.bridge_protocol import (BOARD_MAGIC, IDLE_TIMEOUT_BITS, MAX_REQ_PAYLOAD,
                                              MAX_RSP_PAYLOAD, POWER_FAIL_CYCLES, REQ_LEN,
                                              REQ_SYNC, RSP_LEN, RSP_SYNC, Command, Status)
from ..control import ControlBusSignature
from trainingcxl.spec.cxl_messages import M2SReqOpcode, M2SRwDOpcode, S2MNdrOpcode
from ..cxl.channels import CxlMemSignature
from .host_window import HostPortSignature

__all__ = ["HostBridge", "BRIDGE_VERSION"]

BRIDGE_VERSION = 1
#: Cycles the bridge waits for the device to answer one access.
ANSWER_TIMEOUT = 1 << 20


def crc8_step(crc, byte):
    """CRC-8 (polynomial 0x07) of ``crc`` followed by ``byte``, as logic."""
    bits = [crc[i] ^ byte[i] for i in range(8)]
    for _ in range(8):
        top = bits[7]
        shifted = [Const(0, 1)] + bits[:7]
        bits = [shifted[i] ^ top if i in (0, 1, 2) else shifted[i] for i in range(8)]
    return Cat(*bits)


class Source(enum.Enum, shape=2):
    """Where a response's payload bytes come from."""
    SHORT = 0       # rbuf: 8 bytes or fewer, then zeros
    MEM = 1         # a CXL.mem line
    HOST = 2        # a host-window line


class HostBridge(wiring.Component):
    """Executes the requests of :mod:`~trainingcxl.spec.bridge_protocol`, one at a time.

    Requests arrive as bytes on ``rx``; each gets one response frame on ``tx``.
    Control-window accesses go to ``control``, line reads and writes of device
    memory leave as CXL.mem ``MemRd``/``MemWr`` on ``cxl_mem`` (tag 0, one at a
    time), host-window accesses go to ``host``. ``POWER_FAIL`` raises
    ``power_fail`` for :data:`POWER_FAIL_CYCLES` cycles. The bridge itself
    stays powered: ``lost`` (a power failure from elsewhere, the button) ends
    a wait for the device with ``POWER_LOST``, and a device that does not
    answer within :data:`ANSWER_TIMEOUT` cycles gets ``TIMEOUT``.

    Members
    -------
    rx : In(stream.Signature(8))
    tx : Out(stream.Signature(8))
    control : In(ControlBusSignature)
    cxl_mem : In(CxlMemSignature)
    host : In(HostPortSignature)
    power_fail : Out(1)
    lost : In(1)
    leds : In(8), irq : In(1), button_fails : In(16)
        Reported by ``STATE``.
    """

    def __init__(self, *, divisor, window_lines):
        self._divisor, self._window_lines = divisor, window_lines
        addr_bits = max(1, (window_lines - 1).bit_length())
        super().__init__({
            "rx": In(stream.Signature(8)),
            "tx": Out(stream.Signature(8)),
            "control": In(ControlBusSignature()),
            "cxl_mem": In(CxlMemSignature()),
            "host": In(HostPortSignature(addr_bits)),
            "power_fail": Out(1),
            "lost": In(1),
            "leds": In(8),
            "irq": In(1),
            "button_fails": In(16),
        })

    def elaborate(self, platform):
        m = Module()
        W = MAX_REQ_PAYLOAD * 8
        buf = Signal(W)                         # payload bytes, the newest at the top
        cmd = Signal(8)
        count = Signal(range(MAX_REQ_PAYLOAD + 1))
        crc = Signal(8)
        idle = Signal(range(IDLE_TIMEOUT_BITS * self._divisor + 1))
        wait = Signal(range(ANSWER_TIMEOUT + 1))
        status = Signal(8)
        # Response payloads. A line has its own shift register by source (the device's
        # CXL.mem data, the host window), loaded straight from that source: no wide
        # multiplexer gathers lines from across the chip, and each register can sit by
        # its source. Short answers (8 bytes) and zeros come from ``rbuf``.
        rbuf = Signal(64)
        mem_line = Signal(MAX_RSP_PAYLOAD * 8)
        host_line = Signal(MAX_RSP_PAYLOAD * 8)
        source = Signal(Source)
        rlen = Signal(range(MAX_RSP_PAYLOAD + 1))
        fail_timer = Signal(range(POWER_FAIL_CYCLES + 1))
        command_fails = Signal(16)
        bad_frames = Signal(16)

        def field(length, offset, nbytes):
            """Bytes ``offset .. offset+nbytes-1`` of a ``length``-byte payload."""
            lo = W - 8 * length + 8 * offset
            return buf[lo:lo + 8 * nbytes]

        lost = Signal()
        timed_out = Signal()
        m.d.sync += [lost.eq(self.lost), timed_out.eq(wait == ANSWER_TIMEOUT - 1)]

        rx, tx = self.rx, self.tx
        byte = rx.payload
        m.d.comb += self.power_fail.eq(fail_timer != 0)
        with m.If(fail_timer != 0):
            m.d.sync += fail_timer.eq(fail_timer - 1)

        known = Signal()
        m.d.comb += known.eq(byte <= max(Command))
        req_len = Array(Const(REQ_LEN[c], range(MAX_REQ_PAYLOAD + 1)) for c in Command)
        rsp_len = Array(Const(RSP_LEN[c], range(MAX_RSP_PAYLOAD + 1)) for c in Command)

        def respond(st, length, src=Source.SHORT):
            m.d.sync += [status.eq(st), rlen.eq(length), source.eq(src)]
            m.next = "SYNC"

        # Whether a host line is outside the window, from a register: the payload
        # stays from the CRC byte on, so the compare is ready at EXECUTE and does
        # not run on into the response's status.
        outside = Signal()
        m.d.sync += outside.eq(Mux(cmd == Command.HOST_READ,
                                   field(REQ_LEN[Command.HOST_READ], 0, 2),
                                   field(REQ_LEN[Command.HOST_WRITE], 0, 2)) >= self._window_lines)

        with m.FSM():
            with m.State("HUNT"):
                m.d.comb += rx.ready.eq(1)
                with m.If(rx.valid & (byte == REQ_SYNC)):
                    m.d.sync += [crc.eq(0), idle.eq(0)]
                    m.next = "COMMAND"

            with m.State("COMMAND"):
                m.d.comb += rx.ready.eq(1)
                m.d.sync += idle.eq(idle + 1)
                with m.If(rx.valid):
                    m.d.sync += [cmd.eq(byte), crc.eq(crc8_step(crc, byte)), idle.eq(0),
                                 count.eq(req_len[byte[:4]])]
                    with m.If(~known):
                        m.d.sync += [bad_frames.eq(bad_frames + 1), rbuf.eq(0)]
                        respond(Status.BAD_COMMAND, 0)
                    with m.Elif(req_len[byte[:4]] == 0):
                        m.next = "CRC"
                    with m.Else():
                        m.next = "PAYLOAD"
                with m.Elif(idle == IDLE_TIMEOUT_BITS * self._divisor):
                    m.d.sync += bad_frames.eq(bad_frames + 1)
                    m.next = "HUNT"

            with m.State("PAYLOAD"):
                m.d.comb += rx.ready.eq(1)
                m.d.sync += idle.eq(idle + 1)
                with m.If(rx.valid):
                    m.d.sync += [buf.eq(Cat(buf[8:], byte)), crc.eq(crc8_step(crc, byte)),
                                 count.eq(count - 1), idle.eq(0)]
                    with m.If(count == 1):
                        m.next = "CRC"
                with m.Elif(idle == IDLE_TIMEOUT_BITS * self._divisor):
                    m.d.sync += bad_frames.eq(bad_frames + 1)
                    m.next = "HUNT"

            with m.State("CRC"):
                m.d.comb += rx.ready.eq(1)
                m.d.sync += idle.eq(idle + 1)
                with m.If(rx.valid):
                    m.d.sync += [rbuf.eq(0), wait.eq(0)]
                    with m.If(byte != crc):
                        m.d.sync += bad_frames.eq(bad_frames + 1)
                        respond(Status.BAD_CRC, rsp_len[cmd[:4]])
                    with m.Else():
                        m.next = "EXECUTE"
                with m.Elif(idle == IDLE_TIMEOUT_BITS * self._divisor):
                    m.d.sync += bad_frames.eq(bad_frames + 1)
                    m.next = "HUNT"

            with m.State("EXECUTE"):
                n = rsp_len[cmd[:4]]
                with m.Switch(cmd):
                    with m.Case(Command.PING):
                        m.d.sync += rbuf.eq(BOARD_MAGIC | self._window_lines << 32
                                            | BRIDGE_VERSION << 48)
                        respond(Status.OK, n)
                    with m.Case(Command.STATE):
                        m.d.sync += rbuf.eq(Cat(self.leds, self.irq, Const(0, 7), command_fails,
                                                self.button_fails, bad_frames))
                        respond(Status.OK, n)
                    with m.Case(Command.POWER_FAIL):
                        m.d.sync += [fail_timer.eq(POWER_FAIL_CYCLES),
                                     command_fails.eq(command_fails + 1)]
                        respond(Status.OK, n)
                    with m.Case(Command.REG_READ, Command.REG_WRITE):
                        m.next = "REG"
                    with m.Case(Command.MEM_READ):
                        m.next = "MEM_READ"
                    with m.Case(Command.MEM_WRITE):
                        m.next = "MEM_WRITE"
                    with m.Case(Command.HOST_READ, Command.HOST_WRITE):
                        with m.If(outside):
                            respond(Status.OUT_OF_WINDOW, n)
                        with m.Else():
                            m.next = "HOST"

            self._device_states(m, cmd=cmd, wait=wait, lost=lost, timed_out=timed_out,
                                respond=respond, rsp_len=rsp_len, field=field, rbuf=rbuf,
                                mem_line=mem_line)

            with m.State("HOST"):
                host = self.host
                write = cmd == Command.HOST_WRITE
                n = REQ_LEN[Command.HOST_WRITE]
                m.d.comb += [host.req.valid.eq(1), host.req.payload.write.eq(write),
                             host.req.payload.addr.eq(Mux(write, field(n, 0, 2),
                                                          field(REQ_LEN[Command.HOST_READ], 0, 2))),
                             host.req.payload.data.eq(field(n, 2, 64))]
                with m.If(host.req.ready):
                    with m.If(write):
                        respond(Status.OK, 0)
                    with m.Else():
                        m.next = "HOST_ANSWER"

            with m.State("HOST_ANSWER"):
                with m.If(self.host.rvalid):
                    m.d.sync += host_line.eq(self.host.rdata)
                    respond(Status.OK, RSP_LEN[Command.HOST_READ], Source.HOST)

            # The response: sync, status, rlen bytes of the source (LSB first), CRC.
            self._response_states(m, crc=crc, status=status, rlen=rlen, source=source,
                                  rbuf=rbuf, mem_line=mem_line, host_line=host_line)
        return m

    def _device_states(self, m, *, cmd, wait, lost, timed_out, respond, rsp_len, field, rbuf,
                       mem_line):
        """The states that wait for the device: a control register, a CXL.mem line."""
        # Waits for the device: a power failure or the timeout end them too. Both are
        # registered first, so that no device handshake depends on the wait counter.
        def waiting(state_body):
            m.d.sync += wait.eq(wait + 1)
            with m.If(lost):
                respond(Status.POWER_LOST, rsp_len[cmd[:4]])
            with m.Elif(timed_out):
                respond(Status.TIMEOUT, rsp_len[cmd[:4]])
            with m.Else():
                state_body()

        with m.State("REG"):
            ctl = self.control
            write = cmd == Command.REG_WRITE

            def body():
                m.d.comb += [ctl.req.valid.eq(1), ctl.req.payload.write.eq(write),
                             ctl.req.payload.addr.eq(Mux(write,
                                                         field(REQ_LEN[Command.REG_WRITE], 0, 1),
                                                         field(REQ_LEN[Command.REG_READ], 0, 1))),
                             ctl.req.payload.data.eq(field(REQ_LEN[Command.REG_WRITE], 1, 8))]
                with m.If(ctl.req.ready):
                    m.next = "REG_ANSWER"
            waiting(body)

        with m.State("REG_ANSWER"):
            ctl = self.control

            def body():
                m.d.comb += ctl.rsp.ready.eq(1)
                with m.If(ctl.rsp.valid):
                    m.d.sync += rbuf.eq(Mux(cmd == Command.REG_READ, ctl.rsp.payload.data, 0))
                    respond(Mux(ctl.rsp.payload.err, Status.REG_ERROR, Status.OK),
                            rsp_len[cmd[:4]])
            waiting(body)

        with m.State("MEM_READ"):
            req = self.cxl_mem.m2s_req

            def body():
                m.d.comb += [req.valid.eq(1), req.payload.opcode.eq(M2SReqOpcode.MemRd),
                             req.payload.addr.eq(field(REQ_LEN[Command.MEM_READ], 0, 6))]
                with m.If(req.ready):
                    m.next = "MEM_ANSWER"
            waiting(body)

        with m.State("MEM_WRITE"):
            rwd = self.cxl_mem.m2s_rwd
            n = REQ_LEN[Command.MEM_WRITE]

            def body():
                m.d.comb += [rwd.valid.eq(1), rwd.payload.opcode.eq(M2SRwDOpcode.MemWr),
                             rwd.payload.addr.eq(field(n, 0, 6)),
                             rwd.payload.be.eq(-1), rwd.payload.data.eq(field(n, 6, 64))]
                with m.If(rwd.ready):
                    m.next = "MEM_ANSWER"
            waiting(body)

        with m.State("MEM_ANSWER"):
            drs, ndr = self.cxl_mem.s2m_drs, self.cxl_mem.s2m_ndr

            def body():
                m.d.comb += [drs.ready.eq(1), ndr.ready.eq(1)]
                with m.If(drs.valid):
                    m.d.sync += mem_line.eq(drs.payload.data)
                    respond(Mux(drs.payload.poison, Status.MEM_ERROR, Status.OK),
                            rsp_len[cmd[:4]], Source.MEM)
                with m.Elif(ndr.valid):
                    respond(Mux(ndr.payload.opcode == S2MNdrOpcode.Cmp, Status.OK,
                                Status.MEM_ERROR), rsp_len[cmd[:4]])
            waiting(body)

    def _response_states(self, m, *, crc, status, rlen, source, rbuf, mem_line, host_line):
        """The response: sync, status, ``rlen`` bytes of the source (LSB first), CRC."""
        tx = self.tx
        with m.State("SYNC"):
            m.d.comb += [tx.valid.eq(1), tx.payload.eq(RSP_SYNC)]
            with m.If(tx.ready):
                m.d.sync += crc.eq(crc8_step(Const(0, 8), status))
                m.next = "STATUS"
        with m.State("STATUS"):
            m.d.comb += [tx.valid.eq(1), tx.payload.eq(status)]
            with m.If(tx.ready):
                m.next = "DATA"
        with m.State("DATA"):
            with m.If(rlen == 0):
                m.next = "CHECK"
            with m.Else():
                out = Signal(8)
                with m.Switch(source):
                    with m.Case(Source.MEM):
                        m.d.comb += out.eq(mem_line[:8])
                    with m.Case(Source.HOST):
                        m.d.comb += out.eq(host_line[:8])
                    with m.Default():
                        m.d.comb += out.eq(rbuf[:8])
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(out)]
                with m.If(tx.ready):
                    m.d.sync += [rbuf.eq(rbuf >> 8), mem_line.eq(mem_line >> 8),
                                 host_line.eq(host_line >> 8), rlen.eq(rlen - 1),
                                 crc.eq(crc8_step(crc, out))]
        with m.State("CHECK"):
            m.d.comb += [tx.valid.eq(1), tx.payload.eq(crc)]
            with m.If(tx.ready):
                m.next = "HUNT"

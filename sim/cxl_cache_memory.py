"""Host/GPU memory behind CXL.cache: a numpy array answering the device's requests,
from Python (:class:`HostMemory`) or from gateware beside the device
(:class:`GatewareHostMemory`)."""

import random

import cocotb
import numpy as np
from cocotb.triggers import Timer

from trainingcxl.spec.cxl_messages import (D2HData, D2HReq, D2HReqOpcode, H2DData, H2DRsp,
                                           H2DRspOpcode, UQID_BITS)
from .streams import StreamSink, StreamSource

__all__ = ["HostMemory", "GatewareHostMemory"]

LINE = 64


class _HostArrays:
    """The host program's view of ``self.mem`` (bytes of the lines from ``self.base``)."""

    def _offset(self, byte_addr, nbytes):
        off = byte_addr - self.base * LINE
        if off < 0 or off + nbytes > len(self.mem):
            raise IndexError(f"host bytes {byte_addr:#x}+{nbytes} lie outside the modelled memory")
        return off

    def write_array(self, byte_addr, array):
        raw = np.ascontiguousarray(array).view(np.uint8).ravel()
        off = self._offset(byte_addr, len(raw))
        self.mem[off:off + len(raw)] = raw

    def read_array(self, byte_addr, count, dtype):
        dtype = np.dtype(dtype)
        off = self._offset(byte_addr, count * dtype.itemsize)
        return self.mem[off:off + count * dtype.itemsize].view(dtype).copy()

    def clear(self):
        """The GPU's memory loses its contents with the power."""
        self.mem[:] = 0


class GatewareHostMemory(_HostArrays):
    """The simulation top's :class:`~trainingcxl.sim.rtl.host_memory.HostMemoryModel`,
    switched in (``host_rtl``): the device's requests never reach Python, and the
    host program's arrays go straight into the model's backdoor RAM ``lines``
    (a ``(lines, 64)`` byte array, :func:`trainingcxl.sim.backdoor.ram_array`).
    Answers come ``delay`` cycles (a ``(low, high)`` range) after their request."""

    def __init__(self, dut, *, base, lines, delay):
        self.dut, self.base = dut, base
        self.mem = lines.reshape(-1)
        dut.host_rtl.value = 1
        self.delay = delay

    @property
    def delay(self):
        return self._delay

    @delay.setter
    def delay(self, value):
        lo, hi = value
        if not 0 <= lo <= hi <= lo + 255 or lo > 255:
            raise ValueError(f"host delay {value} is not a range of at most 256 cycles from 0..255")
        self._delay = (lo, hi)
        self.dut.host_delay_lo.value = lo
        self.dut.host_delay_span.value = hi - lo + 1

    @property
    def reads(self):
        return int(self.dut.host_reads.value)

    @property
    def writes(self):
        return int(self.dut.host_writes.value)

    @property
    def errors(self):
        n = int(self.dut.host_errors.value)
        return [f"the host memory model saw {n} CXL.cache protocol errors"] if n else []

    def inject(self, *args, **kwargs):
        raise RuntimeError("fault injection needs the Python host memory: "
                           "DeviceTB(..., host_model='python')")

    def forget(self):
        """Power failure: the model drops its requests in flight itself (``power_fail``)."""


class HostMemory(_HostArrays):
    """Serves CXL.cache requests from ``lines`` lines starting at host line ``base``.

    Reads (``RdCurr``, ``RdShared``, ``RdOwn``) are answered with ``H2D Data``
    and writes (``ItoMWr``, ``WrCur``) with ``GO_WritePull``, each after a
    random delay in ``delay`` cycles, so answers overtake each other. Requests
    outside the window get poisoned data or ``GO_ERR_WritePull``.

    :meth:`inject` makes the next requests fail on purpose: unanswered
    (``"drop"``), answered with poisoned data (reads) or ``GO_ERR_WritePull``
    (writes) (``"error"``).
    """

    def __init__(self, dut, clock, *, base, lines, period_ns, prefix="cxl_cache",
                 delay=(2, 24), seed=0, pause=None):
        self.base, self.lines = base, lines
        self.mem = np.zeros(lines * LINE, dtype=np.uint8)
        self.period_ns = period_ns
        self.delay = delay
        self.rng = random.Random(seed)
        self.rsp = StreamSource(dut, f"{prefix}__h2d_rsp", H2DRsp, clock)
        self.data = StreamSource(dut, f"{prefix}__h2d_data", H2DData, clock)
        self.req = StreamSink(dut, f"{prefix}__d2h_req", D2HReq, clock, pause=pause,
                              callback=self._on_req)
        self.wdata = StreamSink(dut, f"{prefix}__d2h_data", D2HData, clock, pause=pause,
                                callback=self._on_data)
        self._pulls = {}
        self._cqids = set()
        self._epoch = 0                 # answers scheduled before a power failure are dropped
        self._next_uqid = 0
        self.reads = self.writes = 0
        self.errors = []
        self._faults = []               # (kind, "read" | "write", line or None), in order

    def inject(self, kind, op, count=1, *, line=None):
        """Fail the next ``count`` requests of ``op`` (``"read"`` or ``"write"``) with
        ``kind`` (``"drop"`` or ``"error"``); with ``line``, only requests for that
        host line address (a fault in the middle of a descriptor's stream)."""
        if kind not in ("drop", "error") or op not in ("read", "write"):
            raise ValueError(f"unknown fault {kind!r} on {op!r}")
        self._faults += [(kind, op, line)] * count

    def _fault(self, op, addr):
        for k, (kind, which, line) in enumerate(self._faults):
            if which == op and line in (None, addr):
                del self._faults[k]
                return kind
        return None

    def _line(self, addr):
        k = addr - self.base
        if not 0 <= k < self.lines:
            return None
        return int.from_bytes(self.mem[k * LINE:(k + 1) * LINE].tobytes(), "little")

    # -- CXL.cache --------------------------------------------------------------------

    def _later(self, source, payload, on_sent=None):
        lo, hi = self.delay
        cycles = self.rng.randint(lo, hi) if hi > 0 else 0
        if cycles == 0:
            source.send_nowait(payload, on_sent)
            return

        epoch = self._epoch

        async def send():
            await Timer(cycles * self.period_ns, "ns")
            if epoch == self._epoch:
                source.send_nowait(payload, on_sent)
        cocotb.start_soon(send())

    def forget(self):
        """Power failure: the device's requests in flight die with the link."""
        self._epoch += 1
        self.rsp.queue.clear()
        self.data.queue.clear()
        self._pulls.clear()
        self._cqids.clear()

    def _retire(self, cqid):
        return lambda: self._cqids.discard(cqid)

    def _on_req(self, req):
        op = req.opcode
        # A CQID names one transaction until its answer has reached the device.
        if req.cqid in self._cqids:
            self.errors.append(f"CQID {req.cqid} reused while outstanding: {req!r}")
        self._cqids.add(req.cqid)
        if op in (D2HReqOpcode.RdCurr, D2HReqOpcode.RdShared, D2HReqOpcode.RdOwn):
            line = self._line(req.addr)
            self.reads += 1
            fault = self._fault("read", req.addr)
            if fault == "drop":
                self._cqids.discard(req.cqid)       # the host forgot it
                return
            self._later(self.data, {"cqid": req.cqid, "data": line or 0,
                                    "poison": int(line is None or fault == "error")},
                        self._retire(req.cqid))
        elif op in (D2HReqOpcode.ItoMWr, D2HReqOpcode.WrCur):
            uqid = self._next_uqid
            self._next_uqid = (uqid + 1) % (1 << UQID_BITS)
            if uqid in self._pulls:
                self.errors.append(f"UQID {uqid} reused while its data is outstanding")
            fault = self._fault("write", req.addr)
            if fault == "drop":
                self._cqids.discard(req.cqid)
                return
            inside = self._line(req.addr) is not None and fault is None
            self._pulls[uqid] = req.addr if inside else None
            self._later(self.rsp, {
                "opcode": H2DRspOpcode.GO_WritePull if inside else H2DRspOpcode.GO_ERR_WritePull,
                "cqid": req.cqid, "uqid": uqid}, self._retire(req.cqid))
        else:
            self.errors.append(f"unexpected D2H request {req!r}")

    def _on_data(self, d):
        if d.uqid not in self._pulls:
            self.errors.append(f"D2H data for UQID {d.uqid} that was never pulled")
            return
        addr = self._pulls.pop(d.uqid)
        if addr is None:
            return
        k = addr - self.base
        self.mem[k * LINE:(k + 1) * LINE] = np.frombuffer(d.data.to_bytes(LINE, "little"), np.uint8)
        self.writes += 1

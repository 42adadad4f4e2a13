"""The control window: the device's register file, reached from the host (CXL.io-like)."""

from amaranth import *
from amaranth.lib import data, enum, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.host.config import LINE_BYTES
from .common.descriptor import ErrorCode, Op, completion_layout, descriptor_layout

__all__ = ["Reg", "ControlBusSignature", "ControlWindow", "DEVICE_ID"]

#: Value of the ID register: "TCXL" and the register map version.
DEVICE_ID = (0x5443584C << 32) | 1


class Reg(enum.IntEnum):
    """Register addresses (64-bit registers, numbered in 8-byte words).

    RO: read only; RW: read and write; W: write only (reads return 0).
    """
    ID = 0x00               # RO  DEVICE_ID
    GEOMETRY = 0x01         # RO  tables | dim << 8 | lines_per_row << 24 | frac_bits << 32 | max_pooling << 40
    HDM_BASE = 0x02         # RO  host line address of device memory
    MEDIA = 0x03            # RO  media_lines | table_lines << 32
    LIMITS = 0x04           # RO  max_bags | desc_depth << 32
    DESC_OP = 0x08          # RW  op | relaxed << 8 | nolog << 9 | coalesced << 10 | batch << 32
    DESC_SIZE = 0x09        # RW  n_bags | n_indices << 32
    DESC_IDX = 0x0A         # RW  byte address of the indices (64-byte aligned)
    DESC_OFF = 0x0B         # RW  byte address of the offsets
    DESC_VEC = 0x0C         # RW  byte address of the vectors (pooled output)
    DOORBELL = 0x0D         # W   any write submits the staged descriptor
    GPU_BASE = 0x0E         # RW  byte address where the GPU window begins (descriptors' arrays must lie in it)
    GPU_LIMIT = 0x0F        # RW  byte address where it ends (exclusive); after a reset, all host memory below HDM_BASE
    STATUS = 0x10           # RO  busy | queue_full << 1 | queue_level << 8
    SUBMITTED = 0x11        # RO  descriptors accepted by the doorbell
    COMPLETED = 0x12        # RO  descriptors completed (with or without error)
    LAST_DONE = 0x13        # RO  batch | op << 32 | error << 40 of the last completion
    ERROR = 0x14            # RW  first error code since cleared | error count << 32; write clears
    CYCLES = 0x18           # RO  cycles since the last power-up
    LOOKUP_BUSY = 0x19      # RO  cycles the lookup engine was busy
    LOOKUP_LINES = 0x1A     # RO  PMEM lines the lookup engine read
    LOOKUP_BAGS = 0x1B      # RO  bags pooled
    LOOKUP_OVERFLOWS = 0x1C  # RO bags whose pooled vector overflowed
    PMEM_READS = 0x1D       # RO  media lines read
    PMEM_WRITES = 0x1E      # RO  media lines written (persisted)
    CACHE_READS = 0x1F      # RO  host lines read over CXL.cache
    CACHE_WRITES = 0x20     # RO  host lines written over CXL.cache
    MEM_ERRORS = 0x21       # RO  CXL.mem requests refused
    MEM_LAST_ERROR = 0x22   # RO  kind | tag << 8 | line address << 24 of the last refusal
    UPDATE_BUSY = 0x23      # RO  cycles the update engine was busy
    UPDATE_LINES = 0x24     # RO  PMEM lines the update engine rewrote
    UPDATE_FORWARDED = 0x25  # RO of those, lines that took a forwarded value (a hazard resolved on chip)
    IRQ_ACK = 0x28          # RW  completions the host has seen; ``irq`` is high while COMPLETED differs
    LOOKUP_LOG_HOLDS = 0x29  # RO cycles a lookup row read waited for the undo logger
    CKPT_CTRL = 0x30        # RW  enable (bit 0) | host owns the checkpoint regions (bit 1, when not enabled) | staleness bound K << 8 (8 bits)
    MLP_ADDR = 0x31         # RW  byte address of the GPU's staged MLP copy (64-byte aligned)
    MLP_LINES = 0x32        # RW  its length in lines
    CKPT_STATE = 0x33       # RO  ready | logging << 1 | snapshot busy << 2 | snapshot failed << 3 | K in force << 8 | gen << 16 | live records << 32
    COMMITTED = 0x34        # RO  newest committed batch | valid << 32
    SNAPSHOT = 0x35         # RO  newest valid snapshot's batch | valid << 32
    DURABLE = 0x36          # RO  newest durable batch | valid << 32
    RECOVERED = 0x37        # RO  D | m << 32, of the last RECOVER
    RECOVERED_INFO = 0x38   # RO  D and m valid (bits 0, 1) | records rolled back << 32
    LOG_RECORDS = 0x39      # RO  undo records written
    LOG_FULL = 0x3A         # RO  cycles the undo logger waited for ring space
    CKPT_STALLS = 0x3B      # RO  cycles a LOOKUP waited for the snapshot to come within K
    LOG_BARRIER = 0x3C      # RO  cycles an UPDATE waited for its undo records to persist
    RECOVER_CYCLES = 0x3D   # RO  cycles spent in RECOVER
    SNAPSHOT_LINES = 0x3E   # RO  MLP lines pulled into snapshot slots
    LOOKUP_STALLS = 0x40    # RO  busy cycles of the lookup engine without a PMEM read going out
    UPDATE_STALLS = 0x41    # RO  busy cycles of the update engine without a PMEM read or write going out
    PMEM_READS_DATA = 0x42  # RO  media lines read from the tables
    PMEM_READS_LOG = 0x43   # RO  ... from the undo log and commit records
    PMEM_READS_SNAPSHOT = 0x44   # RO  ... from the snapshot slots
    PMEM_WRITES_DATA = 0x45      # RO  media lines written (persisted) to the tables
    PMEM_WRITES_LOG = 0x46       # RO  ... to the undo log and commit records
    PMEM_WRITES_SNAPSHOT = 0x47  # RO  ... to the snapshot slots
    LINK_TO_DEVICE = 0x48        # RO  messages the link carried host -> device
    LINK_TO_DEVICE_DATA = 0x49   # RO  of those, data lines
    LINK_TO_HOST = 0x4A          # RO  messages the link carried device -> host
    LINK_TO_HOST_DATA = 0x4B     # RO  of those, data lines
    LINK_LATENCY = 0x4C     # RW  one-way link latency in cycles: CXL.mem (bits 0-11) | CXL.cache << 16
    LOG_BUSY = 0x4D         # RO  cycles the undo logger held records not yet persistent
    SNAPSHOT_BUSY = 0x4E    # RO  cycles a snapshot pull was in progress
    CACHE_STRAYS = 0x4F     # RO  CXL.cache messages dropped: they named no outstanding transaction
    CACHE_TIMEOUTS = 0x58   # RO  CXL.cache requests the host left unanswered (failed with err)
    # The CXL.mem error log, newest refusal first (hdl/cxl/mem_target.py):
    # record k at 0x50 + 2k (its line address) and 0x51 + 2k (kind | tag << 8 |
    # its number among all refusals << 32, 0 when the record is empty).
    MEM_ERROR_LOG0_ADDR = 0x50
    MEM_ERROR_LOG0 = 0x51
    MEM_ERROR_LOG1_ADDR = 0x52
    MEM_ERROR_LOG1 = 0x53
    MEM_ERROR_LOG2_ADDR = 0x54
    MEM_ERROR_LOG2 = 0x55
    MEM_ERROR_LOG3_ADDR = 0x56
    MEM_ERROR_LOG3 = 0x57


class ControlBusSignature(wiring.Signature):
    """A register bus of two streams, seen from the device.

    ``req``: ``write``, register ``addr`` (:class:`Reg`), ``data``;
    ``rsp``: one per request, ``data`` (0 for writes) and ``err`` for an
    unknown register.
    """

    def __init__(self):
        super().__init__({
            "req": In(stream.Signature(data.StructLayout({"write": 1, "addr": 8, "data": 64}))),
            "rsp": Out(stream.Signature(data.StructLayout({"data": 64, "err": 1}))),
        })

    def __eq__(self, other):
        return isinstance(other, ControlBusSignature)

    def __repr__(self):
        return "ControlBusSignature()"


class ControlWindow(wiring.Component):
    """Registers, the descriptor queue and completion bookkeeping.

    A doorbell write checks the staged descriptor (pointers 64-byte aligned,
    sizes in range, every array it names inside the GPU window ``GPU_BASE`` ..
    ``GPU_LIMIT``) and queues it for the engines; a refused or queue-full doorbell queues
    nothing and records the error in ``ERROR``. Completions from the engines
    update ``COMPLETED``, ``LAST_DONE`` and ``ERROR``.

    Members
    -------
    bus : Out(ControlBusSignature)
    desc : Out(stream.Signature(descriptor_layout))
    done : In(stream.Signature(completion_layout))
    busy : In(1)
    error : Out(1)
        ``ERROR`` holds an error code.
    irq : Out(1)
        Level interrupt: descriptors completed that the host has not acknowledged
        by writing ``COMPLETED`` to ``IRQ_ACK``.
    counters : In(dict of Reg -> 32 or 64 bits)
        Values shown by the read-only counter and status registers.
    ckpt_ctrl, mlp_addr, mlp_lines : Out(64)
        The checkpoint configuration registers, as last written.
    link_latency : Out(64)
        ``LINK_LATENCY``; after a reset, ``config.link.latency`` for both protocols.
    """

    COUNTERS = (Reg.LOOKUP_BUSY, Reg.LOOKUP_LINES, Reg.LOOKUP_BAGS, Reg.LOOKUP_OVERFLOWS,
                Reg.PMEM_READS, Reg.PMEM_WRITES, Reg.CACHE_READS, Reg.CACHE_WRITES,
                Reg.MEM_ERRORS, Reg.MEM_LAST_ERROR, Reg.UPDATE_BUSY, Reg.UPDATE_LINES,
                Reg.UPDATE_FORWARDED, Reg.LOOKUP_LOG_HOLDS, Reg.CKPT_STATE, Reg.COMMITTED,
                Reg.SNAPSHOT, Reg.DURABLE, Reg.RECOVERED, Reg.RECOVERED_INFO, Reg.LOG_RECORDS,
                Reg.LOG_FULL, Reg.CKPT_STALLS, Reg.LOG_BARRIER, Reg.RECOVER_CYCLES,
                Reg.SNAPSHOT_LINES, Reg.LOOKUP_STALLS, Reg.UPDATE_STALLS, Reg.PMEM_READS_DATA,
                Reg.PMEM_READS_LOG, Reg.PMEM_READS_SNAPSHOT, Reg.PMEM_WRITES_DATA,
                Reg.PMEM_WRITES_LOG, Reg.PMEM_WRITES_SNAPSHOT, Reg.LINK_TO_DEVICE,
                Reg.LINK_TO_DEVICE_DATA, Reg.LINK_TO_HOST, Reg.LINK_TO_HOST_DATA,
                Reg.LOG_BUSY, Reg.SNAPSHOT_BUSY, Reg.CACHE_STRAYS, Reg.CACHE_TIMEOUTS,
                Reg.MEM_ERROR_LOG0_ADDR, Reg.MEM_ERROR_LOG0, Reg.MEM_ERROR_LOG1_ADDR,
                Reg.MEM_ERROR_LOG1, Reg.MEM_ERROR_LOG2_ADDR, Reg.MEM_ERROR_LOG2,
                Reg.MEM_ERROR_LOG3_ADDR, Reg.MEM_ERROR_LOG3)

    def __init__(self, config):
        self._config = config
        members = {
            "bus": Out(ControlBusSignature()),
            "desc": Out(stream.Signature(descriptor_layout(config))),
            "done": In(stream.Signature(completion_layout)),
            "busy": In(1),
            "irq": Out(1),
            "error": Out(1),
            "ckpt_ctrl": Out(64),
            "mlp_addr": Out(64),
            "mlp_lines": Out(64),
            "link_latency": Out(64, init=config.link.latency | config.link.latency << 16),
        }
        for reg in self.COUNTERS:
            members[f"ctr_{reg.name.lower()}"] = In(64)
        super().__init__(members)

    def counter(self, reg):
        return getattr(self, f"ctr_{reg.name.lower()}")

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        req, rsp = self.bus.req, self.bus.rsp

        m.submodules.queue = queue = fifo.SyncFIFOBuffered(
            width=descriptor_layout(cfg).size, depth=cfg.desc_depth)
        m.d.comb += [
            self.desc.valid.eq(queue.r_rdy),
            self.desc.payload.eq(queue.r_data),
            queue.r_en.eq(self.desc.ready),
        ]

        d_op = Signal(64)
        d_size = Signal(64)
        d_idx = Signal(64)
        d_off = Signal(64)
        d_vec = Signal(64)
        submitted = Signal(32)
        completed = Signal(32)
        last_done = Signal(64)
        first_error = Signal(ErrorCode)
        error_count = Signal(32)
        cycles = Signal(64)
        m.d.sync += cycles.eq(cycles + 1)
        irq_ack = Signal(32)
        m.d.comb += [self.irq.eq(completed != irq_ack),
                     self.error.eq(first_error != ErrorCode.NONE)]

        staged = Signal(descriptor_layout(cfg))
        m.d.comb += [
            staged.op.eq(d_op[:4]), staged.relaxed.eq(d_op[8]), staged.nolog.eq(d_op[9]),
            staged.coalesced.eq(d_op[10]), staged.batch.eq(d_op[32:]),
            staged.n_bags.eq(d_size[:24]), staged.n_indices.eq(d_size[32:]),
            staged.idx_addr.eq(d_idx[6:]), staged.off_addr.eq(d_off[6:]),
            staged.vec_addr.eq(d_vec[6:]), staged.checked.eq(0),
            queue.w_data.eq(staged),
        ]
        aligned = (d_idx[:6] == 0) & (d_off[:6] == 0) & (d_vec[:6] == 0)
        fits = (d_size[24:32] == 0)

        # The GPU window: every array the staged descriptor names must lie in
        # it, so that a descriptor cannot make the device read or write host
        # memory the driver did not give it. Registered: a doorbell comes at
        # least two cycles after the last write that staged the descriptor.
        gpu_base = Signal(64)
        gpu_limit = Signal(64, init=cfg.hdm_base * LINE_BYTES)
        in_window = Signal()
        if cfg.gpu_window:
            n_bags, n_indices = d_size[:24], d_size[32:]

            def inside(byte_addr, lines):
                start = byte_addr[6:]
                return (start >= gpu_base[6:]) & (start + lines <= gpu_limit[6:])

            idx_in = inside(d_idx, (n_indices + 15) >> 4)           # 16 indices per line
            off_in = inside(d_off, (n_bags + 16) >> 4)              # n_bags + 1 offsets
            vec_in = inside(d_vec, n_bags * cfg.lines_per_row)
            mlp_in = inside(self.mlp_addr, self.mlp_lines)
            with m.Switch(d_op[:4]):
                with m.Case(Op.LOOKUP, Op.UPDATE):
                    m.d.sync += in_window.eq(idx_in & off_in & vec_in)
                with m.Case(Op.FINISH):
                    m.d.sync += in_window.eq(vec_in)
                with m.Case(Op.SNAPSHOT_MLP):
                    m.d.sync += in_window.eq(mlp_in)
                with m.Default():
                    m.d.sync += in_window.eq(1)
        else:
            m.d.comb += in_window.eq(1)

        # Errors: refusals at the doorbell and completions with an error (both
        # may happen in one cycle).
        # A write to ERROR clears it first, so an error of the same cycle counts.
        door_error = Signal(ErrorCode)
        done_error = Signal(ErrorCode)
        clear_errors = Signal()
        kept_first = Mux(clear_errors, ErrorCode.NONE, first_error)
        m.d.sync += error_count.eq(Mux(clear_errors, 0, error_count)
                                   + (door_error != ErrorCode.NONE)
                                   + (done_error != ErrorCode.NONE))
        with m.If(kept_first != ErrorCode.NONE):
            m.d.sync += first_error.eq(kept_first)
        with m.Elif(done_error != ErrorCode.NONE):
            m.d.sync += first_error.eq(done_error)
        with m.Else():
            m.d.sync += first_error.eq(door_error)

        m.d.comb += self.done.ready.eq(1)
        with m.If(self.done.valid):
            d = self.done.payload
            m.d.sync += [
                completed.eq(completed + 1),
                last_done.eq(Cat(d.batch, d.op.as_value(), Const(0, 4), d.error.as_value())),
            ]
            m.d.comb += done_error.eq(d.error)

        # One request at a time; the response is registered.
        rsp_valid = Signal()
        rsp_data = Signal(64)
        rsp_err = Signal()
        m.d.comb += [
            rsp.valid.eq(rsp_valid), rsp.payload.data.eq(rsp_data), rsp.payload.err.eq(rsp_err),
            req.ready.eq(~rsp_valid),
        ]
        with m.If(rsp.valid & rsp.ready):
            m.d.sync += rsp_valid.eq(0)

        geometry = (cfg.n_tables | cfg.dim << 8 | cfg.lines_per_row << 24
                    | cfg.fixed.frac_bits << 32 | cfg.max_pooling << 40)
        ro = {
            Reg.ID: Const(DEVICE_ID, 64),
            Reg.GEOMETRY: Const(geometry, 64),
            Reg.HDM_BASE: Const(cfg.hdm_base, 64),
            Reg.MEDIA: Const(cfg.media_lines | cfg.table_lines << 32, 64),
            Reg.LIMITS: Const(cfg.max_bags | cfg.desc_depth << 32, 64),
            Reg.STATUS: Cat(self.busy | queue.r_rdy, ~queue.w_rdy, Const(0, 6), queue.level),
            Reg.SUBMITTED: submitted,
            Reg.COMPLETED: completed,
            Reg.LAST_DONE: last_done,
            Reg.ERROR: Cat(first_error.as_value(), Const(0, 24), error_count),
            Reg.CYCLES: cycles,
            Reg.DOORBELL: Const(0, 64),
        }
        for reg in self.COUNTERS:
            ro[reg] = self.counter(reg)
        rw = {Reg.DESC_OP: d_op, Reg.DESC_SIZE: d_size, Reg.DESC_IDX: d_idx,
              Reg.DESC_OFF: d_off, Reg.DESC_VEC: d_vec, Reg.IRQ_ACK: irq_ack,
              Reg.CKPT_CTRL: self.ckpt_ctrl, Reg.MLP_ADDR: self.mlp_addr,
              Reg.MLP_LINES: self.mlp_lines, Reg.LINK_LATENCY: self.link_latency}
        if cfg.gpu_window:
            rw.update({Reg.GPU_BASE: gpu_base, Reg.GPU_LIMIT: gpu_limit})

        with m.If(req.valid & req.ready):
            m.d.sync += [rsp_valid.eq(1), rsp_data.eq(0), rsp_err.eq(0)]
            with m.If(req.payload.write):
                with m.Switch(req.payload.addr):
                    for reg, sig in rw.items():
                        with m.Case(reg):
                            m.d.sync += sig.eq(req.payload.data)
                    with m.Case(Reg.ERROR):
                        m.d.comb += clear_errors.eq(1)
                    with m.Case(Reg.DOORBELL):
                        with m.If(~aligned):
                            m.d.comb += door_error.eq(ErrorCode.BAD_POINTER)
                        with m.Elif(~fits):
                            m.d.comb += door_error.eq(ErrorCode.BAD_SIZE)
                        with m.Elif(~in_window):
                            m.d.comb += door_error.eq(ErrorCode.OUT_OF_WINDOW)
                        with m.Elif(~queue.w_rdy):
                            m.d.comb += door_error.eq(ErrorCode.QUEUE_FULL)
                        with m.Else():
                            m.d.comb += queue.w_en.eq(1)
                            m.d.sync += submitted.eq(submitted + 1)
                    with m.Case(*ro.keys()):
                        pass            # writes to read-only registers are ignored
                    with m.Default():
                        m.d.sync += rsp_err.eq(1)
            with m.Else():
                with m.Switch(req.payload.addr):
                    for reg, sig in {**ro, **rw}.items():
                        with m.Case(reg):
                            m.d.sync += rsp_data.eq(sig)
                    with m.Default():
                        m.d.sync += rsp_err.eq(1)
        return m

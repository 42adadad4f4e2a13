"""The control window: the device's register file, reached from the host (CXL.io-like)."""

import operator
from functools import reduce

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import LINE_BYTES
from trainingcxl.spec.descriptors import ErrorCode, Op, completion_layout, descriptor_layout
from trainingcxl.spec.registers import REG, REGISTERS, Access, Kind, Reg, constants, register
from .common.onehot import one_hot_select
from .common.register_slice import a_cycle_later

__all__ = ["ControlBusSignature", "ControlWindow"]

#: Read-only registers the control window computes itself; every other read-only
#: register that is not a build-time constant is an input port (``counter``).
_OWN = {"STATUS", "SUBMITTED", "COMPLETED", "LAST_DONE", "ERROR", "CYCLES"}


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

    With ``config.register_slices`` (boards) a read's value passes a register,
    and with ``read_groups`` (sequences of :attr:`COUNTERS` registers, one per
    block that feeds them) two: each group's values are selected into a
    register of the group's own, which the placer puts beside the block, so
    that one 64-bit bus per group reaches the window instead of one per
    register.

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
    pool_durable : Out(32)
        ``POOL_DURABLE``, on a device of a pool only; after a reset all ones.
    """

    #: The registers whose values come from the rest of the device, from the register map.
    COUNTERS = tuple(Reg[r.name] for r in REGISTERS
                     if r.access is Access.RO and r.kind is not Kind.CONST and r.name not in _OWN)

    def __init__(self, config, *, read_groups=()):
        self._config = config
        self._read_groups = self.read_groups(read_groups)
        members = {
            "bus": Out(ControlBusSignature()),
            "desc": Out(stream.Signature(descriptor_layout(config))),
            "done": In(stream.Signature(completion_layout)),
            "busy": In(1),
            "irq": Out(1),
            "error": Out(1),
            "ckpt_ctrl": Out(REG.CKPT_CTRL.layout),
            "mlp_addr": Out(64),
            "mlp_lines": Out(64),
            "link_latency": Out(REG.LINK_LATENCY.layout,
                                init={"mem": config.link.latency, "cache": config.link.latency}),
        }
        if config.pool.member:
            members["pool_durable"] = Out(32, init=0xFFFF_FFFF)
        for reg in self.COUNTERS:
            members[f"ctr_{reg.name.lower()}"] = In(register(reg).layout)
        super().__init__(members)

    @classmethod
    def read_groups(cls, groups):
        """``groups`` (of register names or :class:`Reg`) as :class:`Reg`; a
        :exc:`ValueError` unless they name :attr:`COUNTERS` registers once each."""
        names = [[r if isinstance(r, str) else Reg(r).name for r in group] for group in groups]
        flat = [name for group in names for name in group]
        stray = sorted(set(flat) - {r.name for r in cls.COUNTERS})
        if stray or len(flat) != len(set(flat)):
            raise ValueError(f"read groups must name counter registers once each "
                             f"(not counters: {', '.join(stray) or 'none'})")
        return tuple(tuple(Reg[name] for name in group) for group in names)

    def counter(self, reg):
        """The input port of register ``reg``, a view of its fields (:data:`REGISTERS`)."""
        return getattr(self, f"ctr_{Reg(reg).name.lower()}")

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
        last_done = Signal(REG.LAST_DONE.layout)
        first_error = Signal(ErrorCode)
        error_count = Signal(32)
        cycles = Signal(64)
        m.d.sync += cycles.eq(cycles + 1)
        irq_ack = Signal(32)
        m.d.comb += [self.irq.eq(completed != irq_ack),
                     self.error.eq(first_error != ErrorCode.NONE)]

        staged = Signal(descriptor_layout(cfg))
        op = data.View(REG.DESC_OP.layout, d_op)
        size = data.View(REG.DESC_SIZE.layout, d_size)
        m.d.comb += [
            staged.op.eq(op.op), staged.relaxed.eq(op.relaxed), staged.nolog.eq(op.nolog),
            staged.coalesced.eq(op.coalesced), staged.batch.eq(op.batch),
            staged.n_bags.eq(size.n_bags), staged.n_indices.eq(size.n_indices),
            staged.idx_addr.eq(d_idx[6:]), staged.off_addr.eq(d_off[6:]),
            staged.vec_addr.eq(d_vec[6:]), staged.checked.eq(0),
            queue.w_data.eq(staged),
        ]
        aligned = (d_idx[:6] == 0) & (d_off[:6] == 0) & (d_vec[:6] == 0)
        fits = (size.reserved == 0)

        gpu_base, gpu_limit, in_window, settling = self._gpu_window(m, op, size, d_idx, d_off, d_vec)
        staged_check = cfg.register_slices and cfg.gpu_window

        door_error, done_error, clear_errors = self._errors(m, first_error, error_count)

        m.d.comb += self.done.ready.eq(1)
        with m.If(self.done.valid):
            d = self.done.payload
            m.d.sync += [
                completed.eq(completed + 1),
                last_done.batch.eq(d.batch), last_done.op.eq(d.op), last_done.error.eq(d.error),
            ]
            m.d.comb += done_error.eq(d.error)

        # One request at a time; the response is registered.
        rsp_valid = Signal()
        rsp_data = Signal(64)
        rsp_err = Signal()
        # Registered (boards), a read's value passes a register (two, in read
        # groups) and its response leaves that many cycles after the take: the
        # address decode and the registers' own logic do not run on into the
        # response. ``late`` marks the cycles a read waits.
        late = Signal(1 + bool(self._read_groups))
        m.d.comb += [
            rsp.valid.eq(rsp_valid), rsp.payload.data.eq(rsp_data), rsp.payload.err.eq(rsp_err),
            req.ready.eq(~rsp_valid & ~late.any() & ~settling.any() if cfg.register_slices
                         else ~rsp_valid),
        ]
        if staged_check:
            m.d.sync += settling.eq(settling >> 1)
        with m.If(rsp.valid & rsp.ready):
            m.d.sync += rsp_valid.eq(0)

        status = Signal(REG.STATUS.layout)
        error_word = Signal(REG.ERROR.layout)
        m.d.comb += [status.busy.eq(self.busy | queue.r_rdy), status.queue_full.eq(~queue.w_rdy),
                     status.queue_level.eq(queue.level),
                     error_word.code.eq(first_error), error_word.count.eq(error_count)]
        ro = {Reg[name]: Const(value, 64) for name, value in constants(cfg).items()}
        ro.update({
            Reg.STATUS: status,
            Reg.SUBMITTED: submitted,
            Reg.COMPLETED: completed,
            Reg.LAST_DONE: last_done,
            Reg.ERROR: error_word,
            Reg.CYCLES: cycles,
            Reg.DOORBELL: Const(0, 64),
        })
        for reg in self.COUNTERS:
            ro[reg] = self.counter(reg)
        rw = {Reg.DESC_OP: d_op, Reg.DESC_SIZE: d_size, Reg.DESC_IDX: d_idx,
              Reg.DESC_OFF: d_off, Reg.DESC_VEC: d_vec, Reg.IRQ_ACK: irq_ack,
              Reg.CKPT_CTRL: self.ckpt_ctrl, Reg.MLP_ADDR: self.mlp_addr,
              Reg.MLP_LINES: self.mlp_lines, Reg.LINK_LATENCY: self.link_latency}
        if cfg.gpu_window:
            rw.update({Reg.GPU_BASE: gpu_base, Reg.GPU_LIMIT: gpu_limit})
        if cfg.pool.member:
            rw[Reg.POOL_DURABLE] = self.pool_durable

        # The value of the register addressed, for a read (0 and ``read_bad`` for no
        # register).
        readable = {**ro, **rw}
        read_value = Signal.like(rsp_data)
        read_bad = Signal()
        if cfg.register_slices:
            # Registered (boards), the take decodes the address into a one-hot
            # register and the next cycle ORs the selected register in: a
            # shallow mux with no decode in front of it, read a cycle after the
            # take.
            chosen = Signal(len(readable))
            with m.If(req.valid & req.ready):
                m.d.sync += chosen.eq(Cat(req.payload.addr == reg for reg in readable))
            m.d.comb += read_value.eq(self._read_select(m, dict(zip(readable, chosen)), readable))
            m.d.sync += read_bad.eq(req.payload.addr.matches(*readable) == 0)
        else:
            with m.Switch(req.payload.addr):
                for reg, sig in readable.items():
                    with m.Case(reg):
                        m.d.comb += read_value.eq(sig)
                with m.Default():
                    m.d.comb += read_bad.eq(1)
        with m.If(req.valid & req.ready):
            m.d.sync += [rsp_valid.eq(1), rsp_data.eq(0), rsp_err.eq(0)]
            with m.If(req.payload.write):
                if staged_check:
                    m.d.sync += settling.eq(-1)
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
                if cfg.register_slices:
                    m.d.sync += [rsp_valid.eq(0), late.eq(1)]
                else:
                    m.d.sync += [rsp_data.eq(read_value), rsp_err.eq(read_bad)]
        if cfg.register_slices:
            with m.If(late.any()):
                m.d.sync += late.eq(late << 1)
            with m.If(late[-1]):
                m.d.sync += [rsp_valid.eq(1), rsp_data.eq(read_value), rsp_err.eq(read_bad)]
        return m

    def _gpu_window(self, m, op, size, d_idx, d_off, d_vec):
        """The GPU window's registers, and whether the staged descriptor's arrays lie in it
        (registered); returns them and the cycles a request waits for the check."""
        cfg = self._config
        # The GPU window: every array the staged descriptor names must lie in
        # it, so that a descriptor cannot make the device read or write host
        # memory the driver did not give it. Registered: a doorbell comes at
        # least two cycles after the last write that staged the descriptor.
        # With register slices (boards) one checker takes the arrays in turn,
        # one a cycle, in three registered steps (the array, its end and
        # start compare, its verdict), and every request waits until a write
        # has passed them (``settling``). Four checks of their own, each an
        # add and two compares of 58 bits, were the critical path of a 46 MHz
        # build and most of the routing congestion of two others.
        gpu_base = Signal(64)
        gpu_limit = Signal(64, init=cfg.hdm_base * LINE_BYTES)
        in_window = Signal()
        staged_check = cfg.register_slices and cfg.gpu_window
        # A write's array is taken up within four cycles, and then passes the
        # three steps and the pick by the op.
        settling = Signal(4 + 3 if staged_check else 1)
        if cfg.gpu_window:
            n_bags, n_indices = size.n_bags, size.n_indices
            arrays = ((d_idx[6:], (n_indices + 15) >> 4),          # 16 indices per line
                      (d_off[6:], (n_bags + 16) >> 4),             # n_bags + 1 offsets
                      (d_vec[6:], n_bags * cfg.lines_per_row),
                      (self.mlp_addr[6:], self.mlp_lines))
            if staged_check:
                turn = Signal(2)
                m.d.sync += turn.eq(turn + 1)
                start = Signal(58)
                lines = Signal(max(len(Value.cast(n)) for _, n in arrays))
                which = Signal(2)
                with m.Switch(turn):
                    for k, (addr, n) in enumerate(arrays):
                        with m.Case(k):
                            m.d.sync += [start.eq(addr), lines.eq(n), which.eq(k)]
                end = a_cycle_later(m, start + lines, "window_end")
                after_base = a_cycle_later(m, start >= gpu_base[6:], "window_after_base")
                judged = a_cycle_later(m, which, "window_judged")
                inside = Signal(len(arrays))
                m.d.sync += inside.bit_select(judged, 1).eq(after_base & (end <= gpu_limit[6:]))
            else:
                inside = Cat((addr >= gpu_base[6:]) & (addr + n <= gpu_limit[6:])
                             for addr, n in arrays)
            idx_in, off_in, vec_in, mlp_in = inside
            with m.Switch(op.op):
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
        return gpu_base, gpu_limit, in_window, settling

    def _errors(self, m, first_error, error_count):
        """``ERROR``'s first error and count, from the refusals at the doorbell and the
        completions with an error; returns their inputs and its clear."""
        cfg = self._config
        # Errors: refusals at the doorbell and completions with an error (both
        # may happen in one cycle).
        # A write to ERROR clears it first, so an error of the same cycle counts.
        door_error = Signal(ErrorCode)
        done_error = Signal(ErrorCode)
        clear_errors = Signal()
        door_seen, done_seen, clear_seen = door_error, done_error, clear_errors
        if cfg.register_slices:
            # Registered (boards), errors are recorded a cycle later: the doorbell's
            # checks and the address decode do not run on into ``ERROR``. A
            # request after the doorbell is taken two cycles later at the
            # earliest, so it reads the error.
            door_seen, done_seen, clear_seen = (
                a_cycle_later(m, s, f"{name}_r")
                for s, name in ((door_error, "door_error"), (done_error, "done_error"),
                                (clear_errors, "clear_errors")))
        kept_first = Mux(clear_seen, ErrorCode.NONE, first_error)
        m.d.sync += error_count.eq(Mux(clear_seen, 0, error_count)
                                   + (door_seen != ErrorCode.NONE)
                                   + (done_seen != ErrorCode.NONE))
        with m.If(kept_first != ErrorCode.NONE):
            m.d.sync += first_error.eq(kept_first)
        with m.Elif(done_seen != ErrorCode.NONE):
            m.d.sync += first_error.eq(done_seen)
        with m.Else():
            m.d.sync += first_error.eq(door_seen)
        return door_error, done_error, clear_errors

    def _read_select(self, m, picked, readable):
        """The value of the register whose bit in ``picked`` (register -> one-hot bit,
        from a register) is set: an OR of masked values, in ``read_groups`` one per
        group into a register of its own, and one for the other registers."""
        def select(regs):
            return one_hot_select(Cat(picked[r] for r in regs), [readable[r] for r in regs])

        if not self._read_groups:
            return select(list(readable))
        parts = []
        for k, group in enumerate(self._read_groups):
            part = Signal(64, name=f"read_group{k}")
            m.d.sync += part.eq(select(group))
            parts.append(part)
        own = Signal(64, name="read_own")       # equally late
        grouped = {r for group in self._read_groups for r in group}
        m.d.sync += own.eq(select([r for r in readable if r not in grouped]))
        return reduce(operator.or_, parts + [own])


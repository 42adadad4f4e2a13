"""The device: CXL endpoint, PMEM controller, lookup engine and control window."""

from amaranth import *
from amaranth.hdl import ResetInserter
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .compute.lookup import LookupEngine
from .compute.update import UpdateEngine
from .checkpoint.engine import CheckpointEngine
from .checkpoint.logger import UndoLogger
from trainingcxl.spec.registers import Reg
from .control import ControlBusSignature, ControlWindow
from .cxl.cache_agent import CacheAgent
from .cxl.link import CxlLink
from .cxl.mem_target import CxlMemTarget
from .cxl.channels import CxlCacheSignature, CxlMemSignature
from .common.absent import AbsentEngine
from .common.register_slice import LinePortSlice, through_slice
from .dispatch import Dispatcher
from .common.line_port import LinePortSignature
from .pmem.controller import PmemController

__all__ = ["Device", "DeviceState", "READ_GROUPS", "read_groups"]

#: The blocks (by submodule name) that drive the control window's registers,
#: grouped: on a board each group's registers are read through a register
#: beside its blocks (:class:`ControlWindow`'s ``read_groups``).
READ_GROUPS = (("lookup",), ("pmem",), ("cache_agent",), ("mem_target",), ("update",), ("ckpt",),
               ("logger", "dispatch"), ("link",))


def read_groups(blocks, groups=READ_GROUPS):
    """The registers of each group of ``blocks`` (name -> component with ``counters``),
    for :class:`ControlWindow`: a register in the first group whose blocks drive it,
    absent blocks and empty groups left out."""
    seen = set()
    result = []
    for names in groups:
        regs = []
        for name in names:
            for reg in blocks[name].counters if name in blocks else ():
                if reg not in seen:
                    seen.add(reg)
                    regs.append(reg)
        if regs:
            result.append(tuple(regs))
    return tuple(result)


class DeviceState(data.Struct):
    """Status lines of the device (a board shows them on LEDs)."""
    busy: 1             # a lookup or update engine is working
    logging: 1          # checkpointing is on: lookups log the rows they read
    recovering: 1       # a RECOVER is running
    unrecovered: 1      # powered up, no RECOVER yet: PMEM may hold an unfinished batch
    error: 1            # the control window's ERROR register holds an error


class Device(wiring.Component):
    """The trainingcxl device as the host sees it.

    ::

        host --CXL.mem--> CxlLink --> CxlMemTarget --port0--+
                                                      +--> PmemController (media)
        control --> ControlWindow --> Dispatcher      |
                    LookupEngine -------------port1---+
                       | rows read                    |
                       v                              |
                    UndoLogger ---------------port4---+
                    UpdateEngine -------port2 (rd), 3 (wr)
                    CheckpointEngine ---port5 (commit, recovery), 6 (snapshot)
                         |  offsets, indices, vectors, MLP snapshots
                         v
        host <--CXL.cache-- CxlLink <-- CacheAgent (7 ports)

    ``config.blocks`` leaves out the link model, the update engine or the
    checkpoint engine (with the undo logger): the ports shift down, a
    missing engine's descriptors complete with ``BAD_OP`` and its counters
    read 0.

    ``power_fail`` resets every register of the device (engines, queues, the
    PMEM write-pending queue, counters); only the PMEM media keeps its contents.

    With ``config.media = "sdram"`` the media is outside: the PMEM controller
    reaches it through ``media``, and a board system puts its SDRAM there.

    Members
    -------
    cxl_mem : Out(CxlMemSignature)
    cxl_cache : Out(CxlCacheSignature)
    control : Out(ControlBusSignature)
    power_fail : In(1)
    irq : Out(1)
        Level interrupt for descriptor completions (see ``Reg.IRQ_ACK``).
    state : Out(DeviceState)
        What the device is doing, for LEDs.
    media : Out(LinePortSignature)
        With ``config.media = "sdram"`` only: the PMEM media's port.
    """

    def __init__(self, config):
        self._config = config
        members = {
            "cxl_mem": Out(CxlMemSignature()),
            "cxl_cache": Out(CxlCacheSignature()),
            "control": Out(ControlBusSignature()),
            "power_fail": In(1),
            "irq": Out(1),
            "state": Out(DeviceState),
        }
        if config.media == "sdram":
            members["media"] = Out(LinePortSignature(addr_bits=config.media_addr_bits, tag_bits=1))
        super().__init__(members)

    @property
    def config(self):
        return self._config

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        has_link = "link" in cfg.blocks
        has_update = "update" in cfg.blocks
        has_ckpt = "checkpoint" in cfg.blocks

        m.submodules.mem_target = target = CxlMemTarget(cfg)
        m.submodules.lookup = lookup = LookupEngine(cfg)
        m.submodules.dispatch = dispatch = Dispatcher(cfg)
        update = UpdateEngine(cfg) if has_update else AbsentEngine(cfg)
        m.submodules.update = update
        ckpt = CheckpointEngine(cfg) if has_ckpt else AbsentEngine(cfg)
        m.submodules.ckpt = ckpt

        # PMEM and CXL.cache clients, in port order (the order is the arbiters' priority).
        # The undo logger and the snapshot pull write in the background.
        pmem_ports = [target.pmem, lookup.pmem]
        cache_ports = [lookup.off_mem, lookup.idx_mem, lookup.out_mem]
        background = ()
        if has_update:
            pmem_ports += [update.pmem_rd, update.pmem_wr]
            cache_ports += [update.off_mem, update.idx_mem, update.delta_mem]
        if has_ckpt:
            m.submodules.logger = logger = UndoLogger(cfg)
            background = (len(pmem_ports), len(pmem_ports) + 2)
            pmem_ports += [logger.pmem, ckpt.pmem, ckpt.snap_pmem]
            cache_ports += [ckpt.snap_host]
        outside = cfg.media == "sdram"
        # The PMEM controller resets on power failure by itself, all but its media
        # (and, with the media outside, the queue to it): it is not under the
        # device's reset below.
        pmem = PmemController(cfg, n_ports=len(pmem_ports), background=background,
                              media_port=outside)
        if outside:
            wiring.connect(m, pmem.media_port, wiring.flipped(self.media))
        m.submodules.cache_agent = agent = CacheAgent(cfg, n_ports=len(cache_ports))
        if has_link:
            m.submodules.link = link = CxlLink(cfg)

        # Every block declares the registers it drives (its ``counters``).
        blocks = {"mem_target": target, "lookup": lookup, "dispatch": dispatch, "update": update,
                  "ckpt": ckpt, "pmem": pmem, "cache_agent": agent}
        if has_ckpt:
            blocks["logger"] = logger
        if has_link:
            blocks["link"] = link
        m.submodules.control = control = ControlWindow(
            cfg, read_groups=read_groups(blocks) if cfg.register_slices else ())
        for block in blocks.values():
            for reg, value in block.counters.items():
                port = control.counter(reg)
                if isinstance(value, dict):
                    m.d.comb += [getattr(port, name).eq(v) for name, v in value.items()]
                else:
                    m.d.comb += port.eq(value)

        for k, client in enumerate(pmem_ports):
            # With register slices the controller puts its own slice on each port.
            wiring.connect(m, client, getattr(pmem, f"port{k}"))
        for k, client in enumerate(cache_ports):
            port = getattr(agent, f"port{k}")
            if cfg.register_slices:
                # Ready is cut as well: the agent's grant logic ends at the
                # slice instead of running on into every engine.
                cut = LinePortSlice(port.signature.flip(), cut_ready=True)
                m.submodules[f"cache_slice{k}"] = cut
                wiring.connect(m, client, cut.up)
                client = cut.down
            wiring.connect(m, client, port)

        if has_link:
            # Every CXL.mem and CXL.cache message crosses the link model.
            wiring.connect(m, wiring.flipped(self.cxl_mem), link.host_mem)
            wiring.connect(m, link.dev_mem, target.cxl)
            wiring.connect(m, wiring.flipped(self.cxl_cache), link.host_cache)
            wiring.connect(m, link.dev_cache, agent.cache)
            m.d.comb += [
                link.mem_latency.eq(control.link_latency.mem),
                link.cache_latency.eq(control.link_latency.cache),
            ]
        else:
            wiring.connect(m, wiring.flipped(self.cxl_mem), target.cxl)
            wiring.connect(m, wiring.flipped(self.cxl_cache), agent.cache)

        if cfg.register_slices:
            # The host's register accesses reach the window, and its answers
            # leave, through a slice each: the bridge's state and the window's
            # decoding are two paths (an access takes two cycles more; the
            # UART brings one every few hundred cycles at most).
            bus = wiring.flipped(self.control)
            wiring.connect(m, through_slice(m, "control_req", bus.req, cut_ready=True),
                           control.bus.req)
            wiring.connect(m, through_slice(m, "control_rsp", control.bus.rsp, cut_ready=True),
                           bus.rsp)
        else:
            wiring.connect(m, wiring.flipped(self.control), control.bus)
        desc_held = C(0)
        if cfg.register_slices:
            # The doorbell queue's pop no longer waits on the engines' ready
            # through the dispatcher's checks: a descriptor moves at most every
            # other cycle, far more often than batches come.
            desc = through_slice(m, "desc_slice", control.desc, cut_ready=True)
            wiring.connect(m, desc, dispatch.desc)
            desc_held = desc.valid
        else:
            wiring.connect(m, control.desc, dispatch.desc)
        wiring.connect(m, dispatch.lookup, lookup.desc)
        wiring.connect(m, dispatch.update, update.desc)
        wiring.connect(m, dispatch.ckpt, ckpt.desc)
        wiring.connect(m, lookup.done, dispatch.lookup_done)
        wiring.connect(m, update.done, dispatch.update_done)
        wiring.connect(m, ckpt.done, dispatch.ckpt_done)
        if has_link:
            # The control window is not behind the link model, but the lines an
            # engine wrote to host memory (a lookup's pooled vectors) are: the
            # agent acknowledges a write once its data enters the link, which
            # then carries it for ``cache_latency`` cycles more. A completion
            # waits until every data line that entered the link towards the host
            # before it has left, so that a host that sees it finds the results
            # in its memory (lines sent after it do not hold it back).
            waiting, mark = Signal(), Signal(32)
            sent = Mux(waiting, mark, link.to_host_data)
            landed = (link.to_host_data_left - sent)[31] == 0     # left >= sent, modulo 2**32
            with m.If(dispatch.done.valid & ~waiting):
                m.d.sync += [waiting.eq(1), mark.eq(link.to_host_data)]
            with m.If(control.done.valid & control.done.ready):
                m.d.sync += waiting.eq(0)
            m.d.comb += [
                control.done.valid.eq(dispatch.done.valid & landed),
                control.done.payload.eq(dispatch.done.payload),
                dispatch.done.ready.eq(control.done.ready & landed),
            ]
        else:
            wiring.connect(m, dispatch.done, control.done)
        m.d.comb += [
            pmem.power_fail.eq(self.power_fail),
            self.irq.eq(control.irq),
            self.state.busy.eq(lookup.busy | (update.busy if has_update else 0)),
            self.state.error.eq(control.error),
            control.busy.eq(dispatch.busy | desc_held | lookup.busy
                            | (update.busy if has_update else 0)),
            # Software checkpointing: the host writes the log, commits and snapshots.
            target.host_owns_checkpoints.eq(control.ckpt_ctrl.host_owns & ~control.ckpt_ctrl.enable),
        ]
        if has_ckpt:
            wiring.connect(m, lookup.log, logger.tap)
            m.d.comb += [
                ckpt.enable.eq(control.ckpt_ctrl.enable),
                ckpt.staleness.eq(control.ckpt_ctrl.staleness),
                ckpt.mlp_addr.eq(control.mlp_addr),
                ckpt.mlp_lines.eq(control.mlp_lines[:32]),
                logger.enable.eq(ckpt.logging),
                logger.gen.eq(ckpt.gen),
                # On a device of a pool, no record the pool may still roll back is
                # reclaimed: the logger's durable point is the pool's if that is older.
                logger.durable.eq(ckpt.durable if not cfg.pool.member else
                                  Mux(control.pool_durable < ckpt.durable,
                                      control.pool_durable, ckpt.durable)),
                logger.durable_valid.eq(ckpt.durable_valid),
                logger.restart.eq(ckpt.restart),
                logger.flush.eq(~lookup.busy),
                # A coalesced UPDATE checks each row against the logger's stamps.
                update.logging.eq(ckpt.logging),
                logger.query.eq(update.log_query),
                logger.query_addr.eq(update.log_addr),
                logger.query_batch.eq(update.log_batch),
                update.log_ok.eq(logger.query_logged),
                dispatch.logging.eq(ckpt.logging),
                dispatch.hold_lookup.eq(ckpt.hold_lookup),
                dispatch.log_drained.eq(logger.drained),
                dispatch.committed.eq(ckpt.committed),
                dispatch.committed_valid.eq(ckpt.committed_valid),
                self.state.logging.eq(ckpt.logging),
                self.state.recovering.eq(ckpt.recovering),
                self.state.unrecovered.eq(~ckpt.ready),
            ]
        else:
            # Nothing to hold the lookup for, nothing it has to wait for.
            m.d.comb += dispatch.log_drained.eq(1)
        top = Module()
        top.submodules.device = ResetInserter(self.power_fail)(m)
        top.submodules.pmem = pmem
        return top

"""Cycle-level model of the CXL link between the host and the device endpoint."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..common.arbiter import RoundRobin
from ..common.rate import RateLimiter
from trainingcxl.spec.cxl_messages import (D2HData, D2HReq, H2DData, H2DRsp, M2SReq, M2SRwD,
                                           S2MDrs, S2MNdr)
from trainingcxl.spec.registers import Reg
from .channels import CxlCacheSignature, CxlMemSignature

__all__ = ["MIN_LATENCY", "LATENCY_BITS", "LinkDirection", "CxlLink", "link_depth"]

#: Fewest cycles from a message's input handshake to its output ``valid``:
#: the FIFO's write-to-read latency. Latency settings below it act as it.
MIN_LATENCY = 2

#: Width of :class:`CxlLink`'s latency inputs (``LinkTiming`` allows up to 4095 cycles).
LATENCY_BITS = 12

# Entry timestamps. The age of a message is ``now - ts`` modulo 2**32, so a
# message that waits more than 2**32 cycles (17 s at 250 MHz) behind a blocked
# head of its channel would look young again; the model accepts that.
_TS_BITS = 32


def link_depth(latency, rate):
    """FIFO depth that sustains ``rate = (num, den)`` messages per cycle over ``latency`` cycles:
    the next power of two at least ``ceil(latency * num / den) + 4``, and at least 4."""
    num, den = rate
    need = -(-max(latency, MIN_LATENCY) * num // den) + 4
    return max(4, 1 << (need - 1).bit_length())


class LinkDirection(wiring.Component):
    """One direction of a link: independent stream channels sharing a bandwidth.

    Each cycle at most one message in total enters, at most ``rate = (num,
    den)`` messages per cycle on average (a token bucket shared by all
    channels). Channels offering a message and having room in their FIFO are
    served round-robin. Every channel has its own delay FIFO of ``depth``
    entries, so a receiver that holds ``ready`` low fills only its own channel
    and never blocks the others (like CXL's per-channel credits).

    Latency: a message whose input handshake happens in cycle ``t`` is offered
    on its output (``valid``) from cycle ``t + max(L, MIN_LATENCY)``, where
    ``L`` is the channel's ``latency`` setting and ``MIN_LATENCY = 2``; it
    leaves at the first such cycle its receiver is ready. Order is kept within
    a channel. Outputs follow the stream rules: ``valid`` does not depend on
    ``ready``, and once offered a message stays offered, unchanged, until
    taken (even if ``latency`` rises meanwhile).

    All state is ``sync`` registers and FIFOs: a reset drops the messages in flight.

    Parameters
    ----------
    shapes : list of shape-castable
        Payload shape of each channel.
    depth : int
        Entries of each channel's FIFO. A channel sustains ``depth / L``
        messages per cycle at most.
    rate : (int, int)
        Shared bandwidth, ``num`` messages every ``den`` cycles, ``1 <= num <= den``.
    latency_bits : int
        Width of each latency setting.
    data_channels : set of int
        Channels whose messages carry a data line (counted by ``data_messages``).

    Members
    -------
    i0 ... : In(stream.Signature(shapes[k]))
        Messages entering the link.
    o0 ... : Out(stream.Signature(shapes[k]))
        Messages leaving the link.
    latency : In(ArrayLayout(latency_bits, len(shapes)))
        Latency of each channel in cycles, ``latency[k]`` for channel ``k``.
    messages : Out(32)
        Messages that entered (all channels).
    data_messages : Out(32)
        Messages that entered on ``data_channels``.
    data_left : Out(32)
        Messages that left on ``data_channels``.
    """

    def __init__(self, shapes, *, depth, rate, latency_bits=12, data_channels=()):
        shapes = list(shapes)
        if not shapes:
            raise ValueError("a link direction needs at least one channel")
        if not (isinstance(depth, int) and depth >= 1):
            raise ValueError(f"depth must be a positive integer, not {depth!r}")
        num, den = rate
        if not (isinstance(num, int) and isinstance(den, int) and 1 <= num <= den):
            raise ValueError(f"rate must be num/den with 1 <= num <= den, not {num}/{den}")
        data_channels = frozenset(data_channels)
        if not data_channels <= set(range(len(shapes))):
            raise ValueError(f"data_channels {sorted(data_channels)} name channels outside "
                             f"0..{len(shapes) - 1}")
        self._shapes = shapes
        self._depth = depth
        self._rate = (num, den)
        self._data_channels = data_channels
        members = {}
        for k, shape in enumerate(shapes):
            members[f"i{k}"] = In(stream.Signature(shape))
            members[f"o{k}"] = Out(stream.Signature(shape))
        members.update({
            "latency": In(data.ArrayLayout(latency_bits, len(shapes))),
            "messages": Out(32),
            "data_messages": Out(32),
            "data_left": Out(32),
        })
        super().__init__(members)

    @property
    def inputs(self):
        return [getattr(self, f"i{k}") for k in range(len(self._shapes))]

    @property
    def outputs(self):
        return [getattr(self, f"o{k}") for k in range(len(self._shapes))]

    def elaborate(self, platform):
        m = Module()
        n = len(self._shapes)

        now = Signal(_TS_BITS)
        m.d.sync += now.eq(now + 1)

        m.submodules.rate = rate = RateLimiter(*self._rate)
        m.submodules.arb = arb = RoundRobin(n)
        accept = Signal()
        m.d.comb += [
            accept.eq(arb.valid & rate.ok),
            arb.advance.eq(accept),
            rate.take.eq(accept),
        ]
        # One-hot grant through a switch: comparing the grant with small
        # constants leaves width mismatches in the Verilog that lint flags.
        granted = Signal(n)
        with m.Switch(arb.grant):
            for k in range(n):
                with m.Case(k):
                    m.d.comb += granted[k].eq(accept)

        for k, (i, o) in enumerate(zip(self.inputs, self.outputs)):
            width = Shape.cast(self._shapes[k]).width
            q = fifo.SyncFIFOBuffered(width=width + _TS_BITS, depth=self._depth)
            m.submodules[f"fifo{k}"] = q

            # Entry: only channels with room compete, so a full channel (its
            # receiver stalled) never takes the grant from the others.
            m.d.comb += [
                arb.requests[k].eq(i.valid & q.w_rdy),
                i.ready.eq(granted[k]),
                q.w_data.eq(Cat(i.payload, now)),
                q.w_en.eq(i.valid & i.ready),
            ]

            # Exit: the head is offered once old enough. ``offered`` keeps it
            # offered until taken, so that a latency raised at run time cannot
            # withdraw a message the receiver has already seen.
            head_ts = q.r_data[width:]
            due = (now - head_ts)[:_TS_BITS] >= self.latency[k]
            offered = Signal(name=f"offered{k}")
            m.d.comb += [
                o.payload.eq(q.r_data[:width]),
                o.valid.eq(q.r_rdy & (due | offered)),
                q.r_en.eq(o.valid & o.ready),
            ]
            m.d.sync += offered.eq(o.valid & ~o.ready)

        is_data = Signal()
        if self._data_channels:
            m.d.comb += is_data.eq(Cat(self.inputs[k].ready for k in sorted(self._data_channels)).any())
        left = Signal()
        if self._data_channels:
            m.d.comb += left.eq(Cat(self.outputs[k].valid & self.outputs[k].ready
                                    for k in sorted(self._data_channels)).any())
        m.d.sync += [
            self.messages.eq(self.messages + accept),
            self.data_messages.eq(self.data_messages + is_data),
            self.data_left.eq(self.data_left + left),
        ]
        return m


class CxlLink(wiring.Component):
    """The CXL link between the host and the device endpoint, both ways.

    ::

        host --host_mem.m2s_req/m2s_rwd, host_cache.h2d_rsp/h2d_data--> [host to device] --> dev_*
        host <--host_mem.s2m_ndr/s2m_drs, host_cache.d2h_req/d2h_data-- [device to host] <-- dev_*

    Each direction is a :class:`LinkDirection` of four channels sharing
    ``config.link.rate`` messages per cycle (the defaults and their origin are
    in ``LinkTiming``, ``spec/config.py``). CXL.mem channels take
    ``mem_latency`` cycles, CXL.cache channels ``cache_latency`` cycles, with
    the semantics of :class:`LinkDirection` (offered ``max(L, 2)`` cycles
    after the input handshake). Both inputs reset to ``config.link.latency``.
    Each channel buffers ``link_depth(config.link.latency, config.link.rate)``
    messages; a larger run-time latency lowers the bandwidth to that many
    messages per latency.

    ``host_mem``/``host_cache`` face the host and have the device's own
    orientation (they receive M2S and H2D, send S2M and D2H); ``dev_mem``/
    ``dev_cache`` are flipped and face the device's CXL.mem target and
    CXL.cache agent. A top puts the link between its ports and the endpoint::

        wiring.connect(m, wiring.flipped(self.cxl_mem), link.host_mem)
        wiring.connect(m, link.dev_mem, target.cxl)

    All state is ``sync`` registers and FIFOs: a reset (power failure) drops
    the messages in flight.

    Members
    -------
    host_mem : Out(CxlMemSignature)
    dev_mem : In(CxlMemSignature)
    host_cache : Out(CxlCacheSignature)
    dev_cache : In(CxlCacheSignature)
    mem_latency, cache_latency : In(LATENCY_BITS)
        Latency of the CXL.mem and of the CXL.cache channels, in cycles.
    to_device, to_device_data : Out(32)
        Messages, and messages carrying a data line, that entered host to device.
    to_host, to_host_data : Out(32)
        The same device to host.
    to_host_data_left : Out(32)
        Messages carrying a data line that left the link device to host: with
        ``to_host_data``, which of the lines the device wrote to host memory are
        still on their way (a completion waits for those sent before it, see
        :class:`~trainingcxl.hdl.top.Device`).
    """

    # Channel order of each direction, and which of them carry data.
    _H2D = ("m2s_req", "m2s_rwd", "h2d_rsp", "h2d_data")
    _D2H = ("s2m_ndr", "s2m_drs", "d2h_req", "d2h_data")
    _DATA = {1, 3}
    _MEM = (0, 1)           # channels 0, 1 are CXL.mem, 2, 3 CXL.cache, both ways

    def __init__(self, config):
        self._config = config
        latency = config.link.latency
        if latency >= 1 << LATENCY_BITS:
            raise ValueError(f"link.latency = {latency} does not fit in {LATENCY_BITS} bits")
        self._depth = link_depth(latency, config.link.rate)
        super().__init__({
            "host_mem": Out(CxlMemSignature()),
            "dev_mem": In(CxlMemSignature()),
            "host_cache": Out(CxlCacheSignature()),
            "dev_cache": In(CxlCacheSignature()),
            "mem_latency": In(LATENCY_BITS, init=latency),
            "cache_latency": In(LATENCY_BITS, init=latency),
            "to_device": Out(32),
            "to_device_data": Out(32),
            "to_host": Out(32),
            "to_host_data": Out(32),
            "to_host_data_left": Out(32),
        })

    @property
    def depth(self):
        """Entries of each channel's FIFO."""
        return self._depth

    @property
    def counters(self):
        """The control window's registers this link model drives: ``{Reg: value}``, or
        ``{Reg: {field: value}}`` for some fields of one (the device connects them)."""
        return {Reg.LINK_TO_DEVICE: self.to_device, Reg.LINK_TO_DEVICE_DATA: self.to_device_data,
                Reg.LINK_TO_HOST: self.to_host, Reg.LINK_TO_HOST_DATA: self.to_host_data}

    def elaborate(self, platform):
        m = Module()
        link = self._config.link

        def direction(shapes):
            return LinkDirection(shapes, depth=self._depth, rate=link.rate,
                                 latency_bits=LATENCY_BITS, data_channels=self._DATA)

        m.submodules.h2d = h2d = direction([M2SReq, M2SRwD, H2DRsp, H2DData])
        m.submodules.d2h = d2h = direction([S2MNdr, S2MDrs, D2HReq, D2HData])

        def ends(name):
            """The host-side and the device-side stream of channel ``name``."""
            mem = name[:3] in ("m2s", "s2m")
            host, dev = (self.host_mem, self.dev_mem) if mem else (self.host_cache, self.dev_cache)
            return getattr(host, name), getattr(dev, name)

        # Seen from inside, a port member that the link receives on is a sink,
        # so our own ends are flipped to face the directions' streams.
        for k, name in enumerate(self._H2D):
            host, dev = ends(name)
            wiring.connect(m, wiring.flipped(host), h2d.inputs[k])
            wiring.connect(m, h2d.outputs[k], wiring.flipped(dev))
        for k, name in enumerate(self._D2H):
            host, dev = ends(name)
            wiring.connect(m, wiring.flipped(dev), d2h.inputs[k])
            wiring.connect(m, d2h.outputs[k], wiring.flipped(host))

        for d in (h2d, d2h):
            for k in range(4):
                m.d.comb += d.latency[k].eq(self.mem_latency if k in self._MEM else self.cache_latency)

        m.d.comb += [
            self.to_device.eq(h2d.messages),
            self.to_device_data.eq(h2d.data_messages),
            self.to_host.eq(d2h.messages),
            self.to_host_data.eq(d2h.data_messages),
            self.to_host_data_left.eq(d2h.data_left),
        ]
        return m

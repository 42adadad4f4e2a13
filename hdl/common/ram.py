"""A RAM whose netlist does not grow with its depth.

Amaranth's :class:`~amaranth.lib.memory.Memory` carries its initial contents
as one constant: a PMEM media of millions of lines, or a table-sized stamp
memory, then takes minutes and gigabytes to convert. :class:`Ram` has the same
port API (``read_port``, ``write_port``) and elaborates to

* a :class:`Memory` for synthesis and for Amaranth's simulator (any platform
  that does not ask for behavioural models), and
* in the simulators' netlist (:data:`.netlist.NETLIST`), an instance of the
  behavioural module in ``ram.v``, whose size is a parameter: the Verilog and
  the simulator build take the same time at any depth.

A RAM with a ``backdoor`` name keeps its contents, under Verilator, in a file the
simulator maps and a test bench maps too (``sim/dpi/ram_backdoor.cpp``): the
bench loads and reads whole tables as numpy arrays, with no transaction.
"""

from pathlib import Path

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.memory import Memory, ReadPort, WritePort

from .netlist import behavioural

__all__ = ["Ram", "VERILOG", "RAM_MODULE", "BACKDOOR_WIDTH"]

#: The behavioural Verilog of the external RAM (module :data:`RAM_MODULE`).
VERILOG = Path(__file__).with_name("ram.v")
RAM_MODULE = "tcxl_ram"
#: Widest word a backdoor RAM holds (its DPI calls move a fixed 512-bit word).
BACKDOOR_WIDTH = 512


class Ram(wiring.Component):
    """A RAM of ``depth`` words of ``shape``, with any number of read ports and one write port.

    Read ports are synchronous (data the cycle after ``addr``, not transparent
    to a write in the same cycle) or combinational (``domain="comb"``); the
    write port has ``granularity`` bits per enable bit. Contents start at zero.

    Parameters
    ----------
    shape : shape-like
    depth : int
    backdoor : str or None
        The name a test bench finds the contents under (letters, digits and
        ``_``); only for synchronous read ports and words of at most
        :data:`BACKDOOR_WIDTH` bits.
    """

    def __init__(self, *, shape, depth, backdoor=None):
        self._width = Shape.cast(shape).width
        self._depth = depth
        if backdoor is not None:
            if not (backdoor.isidentifier() and backdoor.isascii()):
                raise ValueError(f"backdoor name {backdoor!r} must be an identifier")
            if self._width > BACKDOOR_WIDTH:
                raise ValueError(f"a backdoor RAM holds at most {BACKDOOR_WIDTH}-bit words, "
                                 f"not {self._width}")
        self._backdoor = backdoor
        self._reads = []
        self._write = None
        self._memory = None
        super().__init__({})

    def _amaranth_memory(self):
        if self._memory is None:
            self._memory = Memory(shape=self._width, depth=self._depth, init=[])
        return self._memory

    @property
    def data(self):
        """The words, for Amaranth's simulator (``ctx.get(ram.data[addr])``)."""
        return self._amaranth_memory().data

    @property
    def depth(self):
        return self._depth

    @property
    def addr_width(self):
        return max(1, (self._depth - 1).bit_length())

    def read_port(self, *, domain="sync"):
        if domain not in ("sync", "comb"):
            raise ValueError(f"a read port is in domain 'sync' or 'comb', not {domain!r}")
        if domain == "comb" and self._backdoor is not None:
            raise ValueError("a backdoor RAM has synchronous read ports only")
        port = ReadPort.Signature(addr_width=self.addr_width, shape=self._width).create(
            path=(f"rd{len(self._reads)}",))
        self._reads.append((port, domain))
        return port

    def write_port(self, *, granularity=None):
        if self._write is not None:
            raise ValueError("a Ram has one write port")
        gran = self._width if granularity is None else granularity
        if self._width % gran:
            raise ValueError(f"granularity {gran} does not divide the width {self._width}")
        port = WritePort.Signature(addr_width=self.addr_width, shape=self._width,
                                   granularity=None if granularity is None else gran).create(
            path=("wr",))
        self._write = (port, gran)
        return port

    def elaborate(self, platform):
        if behavioural(platform):
            return self._instance()
        m = Module()
        m.submodules.mem = mem = self._amaranth_memory()
        for port, domain in self._reads:
            p = mem.read_port(domain=domain)
            m.d.comb += [p.addr.eq(port.addr), port.data.eq(p.data)]
            if domain == "sync":
                m.d.comb += p.en.eq(port.en)
        if self._write is not None:
            port, gran = self._write
            p = mem.write_port(granularity=None if gran == self._width else gran)
            m.d.comb += [p.addr.eq(port.addr), p.data.eq(port.data), p.en.eq(port.en)]
        return m

    def _instance(self):
        m = Module()
        reads = self._reads or [(ReadPort.Signature(addr_width=self.addr_width,
                                                    shape=self._width).create(), "sync")]
        n = len(reads)
        port, gran = self._write if self._write is not None else (None, self._width)
        rd_data = Signal(n * self._width)
        m.d.comb += Cat(p.data for p, _ in reads).eq(rd_data)
        m.submodules.ram = Instance(
            RAM_MODULE,
            p_WIDTH=self._width, p_DEPTH=self._depth, p_ABITS=self.addr_width, p_GRAN=gran,
            p_READS=n, p_COMB=sum(1 << k for k, (_, d) in enumerate(reads) if d == "comb"),
            p_BACKDOOR=int(self._backdoor is not None), p_NAME=self._backdoor or "",
            i_clk=ClockSignal(),
            i_rd_addr=Cat(p.addr for p, _ in reads),
            i_rd_en=Cat(p.en if d == "sync" else C(1, 1) for p, d in reads),
            o_rd_data=rd_data,
            i_wr_addr=port.addr if port is not None else C(0, self.addr_width),
            i_wr_en=port.en if port is not None else C(0, self._width // gran),
            i_wr_data=port.data if port is not None else C(0, self._width),
        )
        return m

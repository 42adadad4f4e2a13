"""Energy of one training run, from its activity counts.

An :class:`Activity` counts what a run did (wall cycles, GPU busy cycles, PMEM
lines read and written, bytes over the host link, line operations of the
near-memory engines and of the host path); an :class:`EnergyModel` turns the
counts into joules, one term per count (:class:`EnergyBreakdown`). The model is
linear: every term is a count times a per-event energy, or a duration times a
power. Units: one *cycle* is a period of the device clock (``clock_mhz``,
nominally :data:`~trainingcxl.spec.config.NOMINAL_CLOCK_MHZ` = 250 MHz, 4 ns);
one *line* is 64 bytes (512 bits).

Defaults (:data:`DEFAULT_ENERGY`); the key in brackets names the source below,
*est.* marks a figure that is an estimate rather than a published number:

=========================  ============  ===============================================
constant                   default       derivation
=========================  ============  ===============================================
pmem_read_nj_per_line      1.265 nJ      2.47 pJ/bit PCM array read x 512 bit [LEE09]
pmem_write_nj_per_line     8.612 nJ      16.82 pJ/bit PCM array write x 512 bit [LEE09]
link_pj_per_bit            5.0 pJ/bit    32 GT/s SerDes, both ends; *est.* (see below)
engine_pj_per_line_op      163.2 pJ      16 x 0.1 pJ int32 add + 2 x 8 x 10 pJ SRAM
                                         64-bit access (line read + write) [HOR14]
                                         + 1.6 pJ register stage (*est.*)
host_pj_per_line_op        3995.2 pJ     2 x 512 bit x 3.9 pJ/bit HBM2 (line read +
                                         write) [OCO17] + 16 x 0.1 pJ add [HOR14]
gpu_busy_w                 300 W         V100 SXM2 maximum board power [V100]
gpu_idle_w                 50 W          *est.* V100 board idling with a live context
device_static_w            22 W          12 W PMEM module [OPT19] + 10 W FPGA CXL
                                         controller board (*est.*)
host_cpu_w                 125 W         Xeon Gold 6230 thermal design power [XEON19],
                                         while the CPU works in software
host_cpu_idle_w            30 W          *est.* the same socket idling (see below),
                                         in every system for the whole run
clock_mhz                  250 MHz       the device clock (``NOMINAL_CLOCK_MHZ``)
=========================  ============  ===============================================

Sources:

* [LEE09] B. C. Lee, E. Ipek, O. Mutlu, D. Burger, "Architecting Phase Change
  Memory as a Scalable DRAM Alternative", ISCA 2009, technology parameters:
  PCM array read 2.47 pJ/bit, array write 16.82 pJ/bit. Chosen over Optane
  measurements because it is the figure the NVM architecture literature
  reuses (e.g. HOOP, Cai et al., ISCA 2020) and Intel publishes no
  per-access energy for its 3D XPoint media. It is *array* energy only (no
  row buffer, 0.93/1.02 pJ/bit in the same table, and no I/O), and charges a
  write for every bit of the line (no partial or differential write).
* [HOR14] M. Horowitz, "Computing's energy problem (and what we can do about
  it)", ISSCC 2014, 45 nm at 0.9 V: 32-bit integer add 0.1 pJ; 64-bit access
  of an 8 KB SRAM 10 pJ (the table gives one figure; a write is taken to cost
  the same as a read, an estimate). A 64-byte line is 8 such accesses.
* [OCO17] M. O'Connor et al., "Fine-Grained DRAM: Energy-Efficient DRAM for
  Extreme Bandwidth Systems", MICRO 2017: HBM2 access energy about 3.9
  pJ/bit (the paper's HBM2 baseline), the memory of the V100 the GPU model
  assumes.
* [V100] NVIDIA Tesla V100 GPU Accelerator datasheet (2017/2018): maximum
  power consumption 300 W for the SXM2 board (250 W for PCIe). The SXM2 is
  the 15.7 TFLOP/s part :class:`~trainingcxl.spec.config.GpuTiming` models.
  Board power at TDP is an upper bound for small-batch MLP kernels.
* [OPT19] Intel Optane DC Persistent Memory (100 series) product brief,
  2019: a module's average power budget is configurable in 12-18 W (set per
  module with ``ipmctl``'s ``AvgPowerBudget``, at most 18 W). We take one 128 GB module at the low end,
  12 W, as always-on background power: the media energies of [LEE09] are
  two orders below a module's power (9.6 GB/s of reads x 1.265 nJ per line
  is 0.19 W), so most of it is controller, buffers and DDR-T interface.
  That share is an estimate; the 12-18 W range is the cited figure.

* [XEON19] Intel Xeon Gold 6230 processor (Cascade Lake, 20 cores, 2.1 GHz,
  Optane DC persistent memory support), Intel ARK: thermal design power
  125 W. Every system has this host CPU, and it draws its idle power
  (``host_cpu_idle_w``) for the whole run; for the cycles it works in
  software (``host_cpu_cycles``: the ``host-pmem`` systems' gathers,
  pooling, updates and persistent-memory transactions, and the ``pmem``
  system's loads and stores over CXL.mem, during which the CPU waits on
  memory) it draws TDP, so the idle power plus ``host_cpu_w -
  host_cpu_idle_w``. TDP is the sustained power of a fully loaded socket,
  an upper bound for a memory-bound one. The device systems' host issues
  descriptors and copies in between (charged at idle, as if it slept).

Estimates, and how they were made:

* ``link_pj_per_bit`` 5 pJ/bit: the order of magnitude usually quoted for
  32 Gb/s long-reach NRZ SerDes of the PCIe 5.0 class, transmitter and
  receiver together - a round figure, not any one paper's measurement. No
  controller (link and transaction layer) energy is added, for want of a
  published figure. One constant serves every link a system uses (the PCIe
  3.0 copies of the ``pmem`` and ``near-data`` systems as well as CXL).
* the engine's 512-bit pipeline register stage, 1.6 pJ: one 32-bit add's
  energy per 32-bit word (16 x 0.1 pJ); Horowitz gives no flip-flop figure,
  and either way it is 1% of the SRAM term.
* ``gpu_idle_w`` 50 W: typical ``nvidia-smi`` readings of a V100 SXM2 board
  that holds a CUDA context and waits (roughly 40-55 W); not a datasheet
  figure.
* ``host_pj_per_line_op``: the HBM2 traffic of a line operation (read the
  line, write the result) is charged on top of the GPU's board power. If the
  host operations run inside ``gpu_busy_cycles`` the board power already
  contains part of it, so the baseline's figure is an upper bound.
* the FPGA CXL controller board, 10 W: static (leakage) power of a large
  FPGA at operating temperature, its transceivers and board regulators; no
  source, a round estimate.
* ``host_cpu_idle_w`` 30 W: package power of a 20-core, 125 W Cascade Lake
  socket with the operating system idle and a GPU driver polling - a
  quarter of TDP. Intel publishes no idle figure for the Xeon Gold 6230
  (ARK lists TDP only), and SPECpower_ssj2008's "active idle" is measured
  at the wall for a whole server (fans, DRAM, supplies), not per socket, so
  no published figure separates the socket; a RAPL ``PKG_ENERGY`` reading of
  the idle part would replace it. Between package C6 (a few watts, rarely
  reached with PCIe traffic and a polling driver) and C1E (cores halted,
  uncore and mesh clocked) it sits nearer the latter on purpose: the more
  idle power every system pays, the smaller every saving, so a high
  estimate favours the baseline.

Left out: the host CPU's power above idle while it issues descriptors and
copies (about the same for every system), host DRAM and GPU HBM
background power and refresh (only the per-access HBM energy of host line
operations is counted), DRAM refresh inside the PMEM module, power supply and
voltage regulator losses, fans, cooling and the rest of the server, the PMEM
module's 256-byte internal access granularity (a 64-byte access is charged as
64 bytes), partial PCM writes, the link's 128b/130b encoding, idle flits and
link-layer control flits, and the energy cost of an FPGA over an ASIC for the
engines (Horowitz's figures are for a 45 nm ASIC; an FPGA spends several times
more per operation). Every term is linear in its count, so a reader who wants
a different figure can scale the corresponding term of :class:`EnergyBreakdown`.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass

from trainingcxl.spec.config import LINE_BITS, LINE_BYTES, NOMINAL_CLOCK_MHZ

__all__ = [
    "EnergyModel", "Activity", "EnergyBreakdown", "DEFAULT_ENERGY", "link_bytes",
    "FLIT_BYTES", "SLOT_BYTES", "SLOTS_PER_FLIT", "SLOT_WIRE_BYTES",
]

# -- CXL 2.0 68-byte flit ---------------------------------------------------------

#: Bytes of a CXL 2.0 68-byte flit on the wire: a 2-byte protocol ID (Flex Bus
#: physical layer), four 16-byte slots and a 2-byte CRC (the 528-bit CXL.cache/
#: CXL.mem link-layer flit). CXL Specification 2.0 (CXL Consortium, 2020).
FLIT_BYTES = 68
SLOT_BYTES = 16
SLOTS_PER_FLIT = 4
#: Wire bytes charged to one slot: the slot plus a quarter of the flit's
#: protocol ID and CRC, 16 + 4 / 4 = 17.
SLOT_WIRE_BYTES = FLIT_BYTES // SLOTS_PER_FLIT


def link_bytes(data_messages: int, other_messages: int) -> int:
    """Bytes that ``data_messages`` data lines and ``other_messages`` header-only
    messages occupy on a CXL 2.0 link of 68-byte flits.

    A 68-byte flit carries four 16-byte slots between a 2-byte protocol ID and
    a 2-byte CRC (CXL 2.0 specification). A 64-byte data line fills four
    slots; a request, response or data header fills one. Each slot is charged
    its share of the flit, 68 / 4 = 17 bytes, so a data line costs 68 bytes
    and a header-only message 17 bytes. A transfer that carries a header as
    well as its data (a read response, a write request) counts one message of
    each kind. Simplifications: slots are packed without waste (the flit header
    carved out of slot 0, partly filled flits, idle and link-layer control
    flits and 128b/130b encoding are not counted).
    """
    data = _count("data_messages", data_messages)
    other = _count("other_messages", other_messages)
    return SLOT_WIRE_BYTES * (LINE_BYTES // SLOT_BYTES * data + other)


# -- the model ----------------------------------------------------------------------

def _count(name, v):
    """``v`` as a non-negative int, else ValueError naming ``name``."""
    if isinstance(v, bool):
        raise ValueError(f"{name} must be a non-negative integer, not {v!r}")
    try:
        n = operator.index(v)
    except TypeError:
        raise ValueError(f"{name} must be a non-negative integer, not {v!r}") from None
    if n < 0:
        raise ValueError(f"{name} must be a non-negative integer, not {v!r}")
    return n


@dataclass(frozen=True)
class Activity:
    """What one run did, in counts (all non-negative integers).

    ``cycles``
        wall cycles of the run (device clock).
    ``gpu_busy_cycles``
        cycles the GPU computes; the remaining ``cycles - gpu_busy_cycles`` it
        idles. At most ``cycles``.
    ``pmem_lines_read``, ``pmem_lines_written``
        64-byte lines read from and written to the PMEM media.
    ``link_bytes``
        bytes over the host link, both directions (see :func:`link_bytes`).
    ``engine_line_ops``
        line operations of the near-memory engines.
    ``host_line_ops``
        line operations done on the host side (the baselines' pooling and
        updating on the GPU).
    ``host_cpu_cycles``
        cycles the host CPU works in software (the baselines' gathers,
        updates and persistent-memory transactions).

    Construction checks every field and raises :class:`ValueError` naming the
    field that is wrong.
    """
    cycles: int
    gpu_busy_cycles: int
    pmem_lines_read: int
    pmem_lines_written: int
    link_bytes: int
    engine_line_ops: int
    host_line_ops: int
    host_cpu_cycles: int = 0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _count(f"activity.{f.name}", getattr(self, f.name)))
        if self.gpu_busy_cycles > self.cycles:
            raise ValueError(f"activity.gpu_busy_cycles = {self.gpu_busy_cycles} exceeds "
                             f"activity.cycles = {self.cycles}")


@dataclass(frozen=True)
class EnergyBreakdown:
    """Energy of one run by component, in joules.

    ``pmem_read``, ``pmem_write``
        PMEM media reads and writes.
    ``link``
        bytes moved over the host link.
    ``engines``
        line operations of the near-memory engines.
    ``host_ops``
        line operations of the host/GPU software path.
    ``gpu_busy``, ``gpu_idle``
        GPU board energy while computing and while waiting.
    ``device_static``
        CXL controller and PMEM background power over the whole run.
    ``host_cpu``
        the host CPU's power above idle while it works in software.
    ``host_cpu_idle``
        the host CPU's idle power over the whole run (every system has one).
    """
    pmem_read: float
    pmem_write: float
    link: float
    engines: float
    host_ops: float
    gpu_busy: float
    gpu_idle: float
    device_static: float
    host_cpu: float = 0.0
    host_cpu_idle: float = 0.0

    @property
    def total(self) -> float:
        """Sum of every component, in joules."""
        return math.fsum(getattr(self, f.name) for f in dataclasses.fields(self))

    def as_dict(self) -> dict:
        """Every component and ``"total"``, in joules."""
        d = dataclasses.asdict(self)
        d["total"] = self.total
        return d


@dataclass(frozen=True)
class EnergyModel:
    """Per-event energies and powers that turn an :class:`Activity` into joules.

    ``pmem_read_nj_per_line``
        nJ of a PMEM media read of one 64-byte line.
    ``pmem_write_nj_per_line``
        nJ of a PMEM media write of one 64-byte line.
    ``link_pj_per_bit``
        pJ per bit moved over the CXL/PCIe link (SerDes + controller).
    ``engine_pj_per_line_op``
        pJ of one near-memory engine operation on a line (16 int32 adds, a
        pipeline register stage, an SRAM buffer read and write).
    ``host_pj_per_line_op``
        pJ of the same work on the host/GPU software path, per line.
    ``gpu_busy_w``
        GPU board power while computing, W.
    ``gpu_idle_w``
        GPU board power while waiting, W.
    ``device_static_w``
        static/background power of the CXL device controller and its PMEM while
        powered, W.
    ``clock_mhz``
        device clock that turns cycles into seconds, MHz.
    ``host_cpu_w``
        host CPU package power while it works in software, W (idle included).
    ``host_cpu_idle_w``
        host CPU package power while it idles, W: charged for every cycle of
        the run, and ``host_cpu_w - host_cpu_idle_w`` more while it works. At
        most ``host_cpu_w``.

    The module docstring lists the defaults of :data:`DEFAULT_ENERGY` with
    their sources. Every field must be finite and non-negative, ``clock_mhz``
    positive; construction raises :class:`ValueError` naming the field.
    """
    pmem_read_nj_per_line: float
    pmem_write_nj_per_line: float
    link_pj_per_bit: float
    engine_pj_per_line_op: float
    host_pj_per_line_op: float
    gpu_busy_w: float
    gpu_idle_w: float
    device_static_w: float
    clock_mhz: float = float(NOMINAL_CLOCK_MHZ)
    host_cpu_w: float = 0.0
    host_cpu_idle_w: float = 0.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                  and (v > 0 if f.name == "clock_mhz" else v >= 0))
            if not ok:
                need = "positive" if f.name == "clock_mhz" else "non-negative"
                raise ValueError(f"energy.{f.name} must be a finite {need} number, not {v!r}")
        if self.host_cpu_idle_w > self.host_cpu_w:
            raise ValueError(f"energy.host_cpu_idle_w = {self.host_cpu_idle_w} exceeds "
                             f"energy.host_cpu_w = {self.host_cpu_w}")

    @property
    def cycle_s(self) -> float:
        """Seconds per device cycle."""
        return 1e-6 / self.clock_mhz

    def energy(self, activity: Activity) -> EnergyBreakdown:
        """Joules of each component of a run with the counts of ``activity``."""
        if not isinstance(activity, Activity):
            raise TypeError(f"energy() takes an Activity, not {type(activity).__name__}")
        a, t = activity, self.cycle_s
        return EnergyBreakdown(
            pmem_read=a.pmem_lines_read * self.pmem_read_nj_per_line * 1e-9,
            pmem_write=a.pmem_lines_written * self.pmem_write_nj_per_line * 1e-9,
            link=a.link_bytes * 8 * self.link_pj_per_bit * 1e-12,
            engines=a.engine_line_ops * self.engine_pj_per_line_op * 1e-12,
            host_ops=a.host_line_ops * self.host_pj_per_line_op * 1e-12,
            gpu_busy=a.gpu_busy_cycles * t * self.gpu_busy_w,
            gpu_idle=max(0, a.cycles - a.gpu_busy_cycles) * t * self.gpu_idle_w,
            device_static=a.cycles * t * self.device_static_w,
            host_cpu=a.host_cpu_cycles * t * (self.host_cpu_w - self.host_cpu_idle_w),
            host_cpu_idle=a.cycles * t * self.host_cpu_idle_w,
        )


# -- defaults (sources in the module docstring) ----------------------------------------

_INT32_ADD_PJ = 0.1          # [HOR14] 32-bit integer add, 45 nm
_SRAM_64B_PJ = 10.0          # [HOR14] 64-bit access of an 8 KB SRAM, 45 nm
_WORDS = LINE_BYTES // 4     # 16 int32 elements per line
_SRAM_ACCESSES = LINE_BITS // 64   # 8 64-bit accesses per line

DEFAULT_ENERGY = EnergyModel(
    # [LEE09] PCM array read 2.47 pJ/bit x 512 bits = 1.26464 nJ per line.
    pmem_read_nj_per_line=2.47 * LINE_BITS / 1000,
    # [LEE09] PCM array write 16.82 pJ/bit x 512 bits = 8.61184 nJ per line.
    pmem_write_nj_per_line=16.82 * LINE_BITS / 1000,
    # Estimate: 32 GT/s long-reach NRZ SerDes, TX + RX, order of 5 pJ/bit; no controller share.
    link_pj_per_bit=5.0,
    # [HOR14] 16 adds (1.6 pJ) + line read and write of an 8 KB SRAM (2 x 8 x 10 pJ = 160 pJ)
    # + 512-bit register stage estimated at one add per 32-bit word (1.6 pJ): 163.2 pJ.
    engine_pj_per_line_op=(_WORDS * _INT32_ADD_PJ + 2 * _SRAM_ACCESSES * _SRAM_64B_PJ
                           + _WORDS * _INT32_ADD_PJ),
    # [OCO17] HBM2 3.9 pJ/bit x 512 bits, line read + write (3993.6 pJ) + [HOR14] 16 adds
    # (1.6 pJ): 3995.2 pJ.
    host_pj_per_line_op=2 * LINE_BITS * 3.9 + _WORDS * _INT32_ADD_PJ,
    # [V100] SXM2 maximum power consumption 300 W.
    gpu_busy_w=300.0,
    # Estimate: nvidia-smi readings of an idle V100 SXM2 with a CUDA context, ~40-55 W.
    gpu_idle_w=50.0,
    # [OPT19] 128 GB Optane DC PMM at the low end of its 12-18 W power budget (12 W, taken as
    # background power: an estimate) + FPGA CXL controller board, 10 W (estimate).
    device_static_w=12.0 + 10.0,
    clock_mhz=float(NOMINAL_CLOCK_MHZ),
    # [XEON19] Xeon Gold 6230 thermal design power.
    host_cpu_w=125.0,
    # Estimate: the same socket idling, a quarter of TDP (module docstring).
    host_cpu_idle_w=30.0,
)

"""The one configuration object that the HDL, the benches and the host model read.

Every size, timing and format of the system is a field of :class:`Config`, so the
gateware and the golden model cannot drift apart. A configuration is immutable,
checked on construction (with messages that name the field) and serialisable to
JSON, which is how it reaches cocotb test modules running inside a simulator.

Units: one *cycle* is one period of the device clock, nominally
:data:`NOMINAL_CLOCK_MHZ`; one *line* is a 64-byte cache line (512 bits).
Bandwidths are rationals ``(lines, cycles)``: at most ``lines`` transfers every
``cycles`` cycles.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from fractions import Fraction
from dataclasses import dataclass, field

__all__ = [
    "NOMINAL_CLOCK_MHZ", "BOARD_CLOCK_MHZ", "BLOCKS", "LINE_BYTES", "LINE_BITS", "ADDR_BITS", "RING_HEADERS",
    "GROUP_RECORDS", "BUFFER_CAP",
    "ConfigError", "MediaProfile", "MEDIA_PROFILES", "DEFAULT_MEDIA",
    "FixedPoint", "PmemTiming", "LinkTiming", "PoolShape", "CopyTiming", "HostPmemTiming", "SdramTiming", "ModelShape", "GpuTiming", "Config",
]

#: Nominal device clock used to turn the published nanosecond figures into cycles.
NOMINAL_CLOCK_MHZ = 250
#: The FPGA boards' system clock, their oscillator's (a build may ask a PLL for another,
#: ``build --clock-mhz``): the clock the board's SDRAM timing is counted in, on the
#: board and in its simulation (``--target sim-board``).
BOARD_CLOCK_MHZ = 25
#: The device's optional blocks (``Config.blocks``).
BLOCKS = ("link", "update", "checkpoint", "relaxed")
LINE_BYTES = 64
LINE_BITS = 8 * LINE_BYTES
#: Width of a host physical line address (Address[51:6]): every pointer a descriptor holds.
ADDR_BITS = 46
#: Lines of undo ring headers (``Config.ring_base``): written in turn, so a torn one leaves
#: the one before it.
RING_HEADERS = 2
#: Undo records an undo group (one slot of the log ring) holds at most: their
#: (addr, csum) entries share the group line (spec/records.py).
GROUP_RECORDS = 6
#: Most lines the energy-backed write buffer holds for the media when sized
#: automatically (``Config.buffer_size``): 8 MiB, a CXL memory module's write cache
#: behind its hold-up capacitors (the order of the last-level cache an eADR platform
#: flushes on power loss); flushing it at the ``emulated`` media's 1.6 GB/s takes
#: 5.2 ms.
BUFFER_CAP = 1 << 17


class ConfigError(ValueError):
    """A configuration that cannot be built; the message names the field."""


def _check(cond, msg):
    if not cond:
        raise ConfigError(msg)


def _check_rate(name, rate):
    _check(isinstance(rate, tuple) and len(rate) == 2
           and all(isinstance(v, int) for v in rate),
           f"{name} must be a pair (lines, cycles) of integers, not {rate!r}")
    num, den = rate
    _check(1 <= num <= den, f"{name} = {num}/{den} lines per cycle must be in (0, 1]")


@dataclass(frozen=True)
class FixedPoint:
    """Signed two's complement fixed point for embedding elements.

    An element is a ``total_bits``-bit integer ``q`` that stands for
    ``q / 2**frac_bits``. Pooling adds elements exactly in ``total_bits +
    guard_bits`` bits and returns the low ``total_bits`` bits (wrapping); a bag
    whose exact sum does not fit is counted as an overflow. See docs/design.md,
    "Arithmetic".
    """
    total_bits: int = 32
    frac_bits: int = 16
    guard_bits: int = 8

    def __post_init__(self):
        _check(self.total_bits == 32,
               f"fixed.total_bits must be 32 (elements are 32-bit words), not {self.total_bits}")
        _check(0 <= self.frac_bits < self.total_bits,
               f"fixed.frac_bits must be in [0, {self.total_bits}), not {self.frac_bits}")
        _check(1 <= self.guard_bits <= 16,
               f"fixed.guard_bits must be in [1, 16], not {self.guard_bits}")

    @property
    def acc_bits(self):
        return self.total_bits + self.guard_bits


def _construct(klass, fields, what):
    """``klass(**fields)``; a value of the wrong type becomes a :class:`ConfigError`."""
    try:
        return klass(**fields)
    except ConfigError:
        raise
    except (TypeError, ValueError, ArithmeticError) as e:
        raise ConfigError(f"{what}: a value has the wrong type or range ({e})") from None


@dataclass(frozen=True)
class MediaProfile:
    """One persistent-memory module's figures, declared once for every system: the
    device's PMEM model reaches them in cycles of its clock (:meth:`pmem_timing`,
    ``Config.pmem``), the ``host-pmem`` baseline's CPU through its loads and stores
    (:class:`HostPmemTiming`, from the same ``Config.pmem``).

    ``read_ns``: a random 64-byte read's latency; ``write_ns``: a write's time until
    it is persistent; ``read_gbps`` and ``write_gbps``: sustained bandwidth."""
    name: str
    read_ns: float
    write_ns: float
    read_gbps: float
    write_gbps: float
    source: str

    def timing(self, clock_mhz=NOMINAL_CLOCK_MHZ):
        """The :class:`PmemTiming` fields of this media at a ``clock_mhz`` clock: latencies
        in cycles, rates as (lines, cycles)."""
        def cycles(ns):
            return max(4, round(ns * clock_mhz / 1000))

        def rate(gbps):
            lines = Fraction(gbps * 1000 / (clock_mhz * LINE_BYTES)).limit_denominator(1024)
            return (lines.numerator, lines.denominator)

        return {"read_latency": cycles(self.read_ns), "write_latency": cycles(self.write_ns),
                "read_rate": rate(self.read_gbps), "write_rate": rate(self.write_gbps)}


#: The media profiles a configuration may take (``Config.with_media``).
MEDIA_PROFILES = {p.name: p for p in (
    # The paper's emulation: DRAM latency x3 (read) and x7 (write), bandwidth x0.6
    # and x0.1, on a DRAM reference of 80 ns and 16 GB/s (PmemTiming below).
    MediaProfile("emulated", read_ns=240.0, write_ns=560.0, read_gbps=9.6, write_gbps=1.6,
                 source="TrainingCXL's PMEM emulation (x3/x7 latency, x0.6/x0.1 bandwidth of "
                        "80 ns, 16 GB/s DRAM)"),
    # One first-generation Optane DC module on a Cascade Lake Xeon: a random 64-byte
    # load 305 ns, a store, clwb and sfence to the ADR domain 62.3 ns [YANG20, Fig. 2];
    # 6.6 GB/s read and 2.3 GB/s write [IZR19].
    MediaProfile("optane", read_ns=305.0, write_ns=62.3, read_gbps=6.6, write_gbps=2.3,
                 source="Intel Optane DC PMM, one module: Yang et al., FAST 2020, Fig. 2; "
                        "Izraelevitz et al., arXiv:1903.05714"),
)}
#: The profile of the default ``Config.pmem``.
DEFAULT_MEDIA = "emulated"
_DEFAULT_TIMING = MEDIA_PROFILES[DEFAULT_MEDIA].timing()


@dataclass(frozen=True)
class PmemTiming:
    """Timing of the PMEM controller model.

    The defaults are the ``emulated`` media profile (:data:`MEDIA_PROFILES`): they follow the TrainingCXL paper's PMEM emulation relative to
    DRAM (read latency 3x, write latency 7x, read bandwidth 0.6x, write
    bandwidth 0.1x), applied to a DRAM reference of 80 ns load-to-use latency
    (a typical DDR4 idle latency) and one 64-byte line per cycle at 250 MHz
    (16 GB/s, about one DDR4-2000 channel):

    =============  ========  ===============  ==============
    figure         DRAM      PMEM (factor)    PMEM in cycles
    =============  ========  ===============  ==============
    read latency   80 ns     240 ns (3x)      60
    write latency  80 ns     560 ns (7x)      140
    read bw        16 GB/s   9.6 GB/s (0.6x)  3 lines / 5
    write bw       16 GB/s   1.6 GB/s (0.1x)  1 line / 10
    =============  ========  ===============  ==============

    ``write_latency`` is the time a write spends in the volatile write-pending
    queue before it reaches the media (and becomes persistent).

    The energy-backed write buffer (docs/design.md, "Failure model") sits in front
    of the media, as in CXL memory modules with power-loss protection and eADR
    platforms: a write is persistent once the buffer has taken it (``buffer_latency``
    cycles after its take), and the buffer drains to the media at ``write_rate``,
    holding at most ``buffer_lines`` lines on their way there; the checkpoint region
    (every region after the tables: the undo log ring, the commit slots, the ring
    headers and the MLP snapshot slots) lives in the buffer itself and never drains. On a power failure the buffer's stored energy writes
    what it holds to the media. ``buffer_lines`` None (the default) sizes it
    automatically (:attr:`Config.buffer_size`), 0 leaves it out (the volatile
    write-pending queue is then the media's front). Internal media only
    (``media="bram"``), without register slices: the boards keep the volatile queue.
    """
    read_latency: int = _DEFAULT_TIMING["read_latency"]
    write_latency: int = _DEFAULT_TIMING["write_latency"]
    read_rate: tuple[int, int] = _DEFAULT_TIMING["read_rate"]
    write_rate: tuple[int, int] = _DEFAULT_TIMING["write_rate"]
    wpq_depth: int = 16
    read_depth: int = 64
    buffer_lines: int | None = None
    buffer_latency: int = 16

    def __post_init__(self):
        # The read path is a media read plus a buffered FIFO: 4 cycles at least.
        for name in ("read_latency", "write_latency"):
            v = getattr(self, name)
            _check(isinstance(v, int) and 4 <= v <= 4096,
                   f"pmem.{name} must be an integer number of cycles in [4, 4096], not {v!r}")
        _check_rate("pmem.read_rate", self.read_rate)
        _check_rate("pmem.write_rate", self.write_rate)
        for name in ("wpq_depth", "read_depth"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 4 and (v & (v - 1)) == 0 and v <= 1024,
                   f"pmem.{name} must be a power of two in [4, 1024], not {v!r}")
        v = self.buffer_lines
        _check(v is None or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1 << 24),
               f"pmem.buffer_lines must be an integer in [0, {1 << 24}] (0: no buffer) or null "
               f"(sized automatically), not {v!r}")
        v = self.buffer_latency
        _check(isinstance(v, int) and 4 <= v <= 4096,
               f"pmem.buffer_latency must be an integer number of cycles in [4, 4096], not {v!r}")


@dataclass(frozen=True)
class LinkTiming:
    """The CXL link between the host and the device, modelled in the RTL (``hdl/cxl/link.py``).

    ``latency`` is the one-way delay of a message in cycles, ``rate`` the
    messages that may enter the link per cycle in each direction (one rate
    shared by all channels of a direction). Defaults, at 250 MHz:

    * latency 10 cycles (40 ns) one way: Pond (Li et al., ASPLOS 2023)
      measures a CXL memory access at 70-90 ns above a local DRAM access,
      the round trip through both ports, so about 40 ns each way;
    * one message per cycle: a CXL 2.0 x4 link at 32 GT/s moves 16 GB/s
      each way (CXL 2.0 specification, 68-byte flits on PCIe 5.0), one
      64-byte line per 4 ns cycle.

    The host memory behind CXL.cache adds its own access time
    (``trainingcxl.host.driver.ports.DeviceTB.HOST_DELAY``).
    """
    latency: int = 10
    rate: tuple[int, int] = (1, 1)

    def __post_init__(self):
        _check(isinstance(self.latency, int) and 0 <= self.latency <= 4095,
               f"link.latency must be an integer number of cycles in [0, 4095], not {self.latency!r}")
        _check_rate("link.rate", self.rate)


@dataclass(frozen=True)
class PoolShape:
    """A pool of devices behind a CXL switch (host side only; :mod:`trainingcxl.spec.pool`).

    ``devices``: how many devices hold the tables (1: one device attached straight
    to the host, no switch). ``switch_latency``: cycles a switch adds to every
    message one way, 10 (40 ns at 250 MHz): a switch puts a second pair of CXL ports
    on the path, its upstream and downstream ports, and :class:`LinkTiming` charges a
    pair of ports 40 ns each way (Pond, Li et al., ASPLOS 2023: 70-90 ns a round
    trip); the switching logic itself is left out, which favours the pool.

    ``member`` (set by :func:`trainingcxl.spec.pool.shards` on each device of a pool of
    more than one): the device's gateware keeps every undo record of a batch the host
    has not said the whole pool passed (``POOL_DURABLE``), and its ``RECOVER`` rolls back
    to the batch the host names, the pool's durable batch, when that is older than its
    own (docs/pool.md, "Exact recovery").

    ``split``: tables may be split into ranges of rows over several devices, so that
    there may be more devices than tables and no device holds more than its share of
    the rows (:func:`trainingcxl.spec.pool.pieces`); else each device holds whole
    tables.
    """
    devices: int = 1
    switch_latency: int = 10
    member: bool = False
    split: bool = False

    def __post_init__(self):
        _check(isinstance(self.devices, int) and 1 <= self.devices <= 64,
               f"pool.devices must be an integer in [1, 64], not {self.devices!r}")
        _check(isinstance(self.switch_latency, int) and 0 <= self.switch_latency <= 2048,
               f"pool.switch_latency must be cycles in [0, 2048], not {self.switch_latency!r}")
        _check(isinstance(self.member, bool), f"pool.member must be true or false, not "
                                              f"{self.member!r}")
        _check(isinstance(self.split, bool), f"pool.split must be true or false, not "
                                             f"{self.split!r}")


@dataclass(frozen=True)
class CopyTiming:
    """Explicit copies over a non-coherent PCIe link (host side only).

    The ``pmem`` and ``near-data`` systems move data between GPU, host and
    device memory with DMA copies instead of CXL.cache. A copy of ``n`` bytes
    costs ``setup_cycles + n / bytes_per_cycle`` and the host waits for it:

    * ``bytes_per_cycle`` 48: PCIe 3.0 x16, 15.75 GB/s raw, about 12 GB/s
      achieved by large DMA transfers (the V100's host link), 48 bytes per 4 ns;
    * ``setup_cycles`` 250 (1 us): descriptor, doorbell and completion of one
      DMA; Neugebauer et al. ("Understanding PCIe performance for end host
      networking", SIGCOMM 2018) measure 0.5-1 us for small DMA round trips.
    """
    bytes_per_cycle: int = 48
    setup_cycles: int = 250

    def __post_init__(self):
        _check(isinstance(self.bytes_per_cycle, int) and self.bytes_per_cycle >= 1,
               f"copy.bytes_per_cycle must be a positive integer, not {self.bytes_per_cycle!r}")
        _check(isinstance(self.setup_cycles, int) and self.setup_cycles >= 0,
               f"copy.setup_cycles must be a non-negative integer, not {self.setup_cycles!r}")

    def cycles(self, nbytes):
        """Cycles of one copy of ``nbytes`` (0 for nothing to copy)."""
        return self.setup_cycles + -(-nbytes // self.bytes_per_cycle) if nbytes else 0


@dataclass(frozen=True)
class HostPmemTiming:
    """The CPU of the ``host-pmem`` baseline, the system the paper compares against:
    PMEM on the host's memory bus, reached by the CPU's loads and stores (host side only).

    The media are the configuration's own (``Config.pmem``, a :class:`MediaProfile`):
    a group of loads costs the first line's read latency, then its lines at the read
    rate (the gather is bandwidth-bound: a 20-core socket keeps enough misses
    outstanding); a fenced group of stores costs its lines at the write rate, then the
    write latency of the last (until it is persistent). So both systems reach the
    same media at the same rates.

    The CPU's own work is charged too, from a microbenchmark of its kernels in C
    (:mod:`trainingcxl.host.model.cpu_costs`, ``trainingcxl bench --cpu``), nanoseconds
    on one core: ``dedup_ns`` per index (a radix sort of the batch's keys),
    ``pool_ns`` per element pooled, ``scatter_ns`` per gradient element summed into
    its row, ``apply_ns`` per row element updated. The work spreads over ``cores``
    cores perfectly, which favours the baseline: 20, a Xeon Gold 6230's, the
    Cascade Lake part of the Optane measurements. Pooling overlaps the loads it
    follows (the CPU adds as lines arrive); deduplication precedes them and the
    gradients' summing follows the GPU step.
    """
    dedup_ns: float = 5.7
    pool_ns: float = 0.47
    scatter_ns: float = 2.6
    apply_ns: float = 0.12
    cores: int = 20

    def __post_init__(self):
        for name in ("dedup_ns", "pool_ns", "scatter_ns", "apply_ns"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                   and v >= 0, f"host_pmem.{name} must be a non-negative number, not {v!r}")
        _check(isinstance(self.cores, int) and 1 <= self.cores <= 1024,
               f"host_pmem.cores must be an integer in [1, 1024], not {self.cores!r}")

    @staticmethod
    def read_cycles(pmem, lines):
        """Cycles of the CPU loading ``lines`` lines from media of timing ``pmem`` (0 for none)."""
        if not lines:
            return 0
        num, den = pmem.read_rate
        return pmem.read_latency + -(-lines * den // num)

    @staticmethod
    def write_cycles(pmem, lines):
        """Cycles of storing ``lines`` lines, flushing them and fencing until the last is
        persistent (0 for none)."""
        if not lines:
            return 0
        num, den = pmem.write_rate
        return -(-lines * den // num) + pmem.write_latency

    def cpu_cycles(self, *, dedup=0, pool=0, scatter=0, apply=0):
        """Device cycles of the CPU's kernels on ``dedup`` indices and ``pool``,
        ``scatter`` and ``apply`` elements, spread over the cores."""
        ns = (dedup * self.dedup_ns + pool * self.pool_ns + scatter * self.scatter_ns
              + apply * self.apply_ns) / self.cores
        return math.ceil(ns * NOMINAL_CLOCK_MHZ / 1000)


@dataclass(frozen=True)
class SdramTiming:
    """An SDR SDRAM chip's geometry and timing: the ULX3S's (ISSI IS42S16160G,
    16M x 16 bits, 4 banks of 8,192 rows of 512 columns; 32 MiB) by default.

    Times are in nanoseconds and become cycles of the controller's clock,
    rounded up (:meth:`cycles`). ``trcd_ns``, ``trp_ns``, ``twr_ns``,
    ``trfc_ns`` and ``trefi_ns`` are those of LiteDRAM's module table for this
    part [LITEDRAM], longer than the data sheet's minimums [IS42S16160G];
    ``tras_ns`` and ``trc_ns`` (which that table leaves out) are the PC133
    figures of 42 and 60 ns, at least the data sheet's for the -7 grade the
    board carries. ``init_us`` and ``init_refreshes`` are the longer of the
    start-up sequences that ISSI's and Alliance's (AS4C32M16SB, fitted to
    later ULX3S boards) data sheets ask for: a pause with the clock running,
    PRECHARGE ALL, that many AUTO REFRESH commands, then LOAD MODE REGISTER.
    ``cas_latency`` 2 is allowed up to 100 MHz. A user with another chip
    changes the fields; nothing here has been checked on a board.

    [IS42S16160G] ISSI, "IS42S16160G / IS45S16160G 256Mb Synchronous DRAM",
    data sheet (Rev. 2015), tables "AC electrical characteristics".
    [LITEDRAM] enjoy-digital/litedram, ``litedram/modules.py``, class
    ``IS42S16160`` (tRP = tRCD = tWR = 20 ns, tRFC = 70 ns, tREFI = 64 ms / 8,192).
    """
    banks: int = 4
    rows: int = 8192
    cols: int = 512
    dq_bits: int = 16
    cas_latency: int = 2
    trcd_ns: float = 20.0
    trp_ns: float = 20.0
    tras_ns: float = 42.0
    trc_ns: float = 60.0
    trfc_ns: float = 70.0
    twr_ns: float = 20.0
    tmrd_cycles: int = 2
    trefi_ns: float = 64e6 / 8192
    init_us: float = 200.0
    init_refreshes: int = 8

    def __post_init__(self):
        for name in ("banks", "rows", "cols"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 2 and (v & (v - 1)) == 0,
                   f"sdram.{name} must be a power of two, not {v!r}")
        _check(self.dq_bits in (8, 16, 32), f"sdram.dq_bits must be 8, 16 or 32, not {self.dq_bits!r}")
        _check(self.cas_latency in (2, 3), f"sdram.cas_latency must be 2 or 3, not {self.cas_latency!r}")
        for name in ("trcd_ns", "trp_ns", "tras_ns", "trc_ns", "trfc_ns", "twr_ns", "trefi_ns",
                     "init_us"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
                   f"sdram.{name} must be a positive number, not {v!r}")
        for name in ("tmrd_cycles", "init_refreshes"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 1, f"sdram.{name} must be a positive integer, not {v!r}")

    @property
    def words_per_line(self):
        """Beats of the data bus in a 64-byte line."""
        return LINE_BITS // self.dq_bits

    @property
    def lines(self):
        """64-byte lines the chip holds."""
        return self.banks * self.rows * self.cols // self.words_per_line

    @staticmethod
    def cycles(ns, clock_mhz):
        """At least ``ns`` nanoseconds in cycles of ``clock_mhz``."""
        return max(1, math.ceil(ns * clock_mhz / 1000 - 1e-9))


@dataclass(frozen=True)
class ModelShape:
    """The dense part of DLRM, run by the GPU model (host side only).

    ``bottom_hidden`` and ``top_hidden`` list the hidden layer widths. The
    bottom MLP maps ``dense_features`` through them to ``Config.dim`` (its
    output meets the embeddings in the dot-product interaction); the top MLP
    maps the interaction through them to one logit. The Criteo Kaggle DLRM
    (13-512-256-64-16 and 512-256-1) is ``bottom_hidden=(512, 256, 64)``,
    ``top_hidden=(512, 256)``. ``lr`` is the SGD learning rate of every
    parameter; ``batch_size`` the samples per batch a training run uses unless
    told otherwise. ``tables``: the embedding tables the interaction sees, 0 for
    the configuration's own; a device of a pool holds some of the model's tables
    (:mod:`trainingcxl.spec.pool`) and snapshots the whole MLP.
    """
    dense_features: int = 13
    bottom_hidden: tuple[int, ...] = (64,)
    top_hidden: tuple[int, ...] = (64,)
    lr: float = 0.1
    batch_size: int = 32
    tables: int = 0

    def __post_init__(self):
        _check(isinstance(self.tables, int) and 0 <= self.tables <= 4096,
               f"model.tables must be a table count in [0, 4096], not {self.tables!r}")
        _check(isinstance(self.dense_features, int) and self.dense_features >= 1,
               f"model.dense_features must be a positive integer, not {self.dense_features!r}")
        for name in ("bottom_hidden", "top_hidden"):
            v = getattr(self, name)
            _check(isinstance(v, tuple) and all(isinstance(w, int) and w >= 1 for w in v),
                   f"model.{name} must be a tuple of layer widths, not {v!r}")
        _check(isinstance(self.lr, (int, float)) and 0 < self.lr <= 10,
               f"model.lr must be in (0, 10], not {self.lr!r}")
        _check(isinstance(self.batch_size, int) and self.batch_size >= 1,
               f"model.batch_size must be a positive integer, not {self.batch_size!r}")


@dataclass(frozen=True)
class GpuTiming:
    """Cycle cost of the GPU's work per batch (host side only).

    Defaults: an NVIDIA V100 (15.7 TFLOP/s FP32, 900 GB/s HBM2; NVIDIA V100
    datasheet) at 25% of peak compute and 50% of peak bandwidth, as small-batch
    MLPs reach, expressed per 4 ns device cycle; 2 us per kernel launch (launches
    replayed from a CUDA graph; a plain launch costs about 5 us); a 6 MiB L2 cache
    (NVIDIA Tesla V100 GPU architecture whitepaper), where the rows a batch gathers
    stay while a pooling kernel reads their repeats.
    """
    flops_per_cycle: int = 15_700
    bytes_per_cycle: int = 1_800
    launch_cycles: int = 500
    l2_bytes: int = 6 << 20

    def __post_init__(self):
        for name in ("flops_per_cycle", "bytes_per_cycle"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 1, f"gpu.{name} must be a positive integer, not {v!r}")
        for name in ("launch_cycles", "l2_bytes"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 0,
                   f"gpu.{name} must be a non-negative integer, not {v!r}")


@dataclass(frozen=True)
class Config:
    """Sizes, formats and timings of one device and its host model.

    Parameters
    ----------
    tables : tuple of int
        Rows of each embedding table.
    dim : int
        Elements per embedding row; a row is ``dim * 4`` bytes, one or more whole lines.
    max_pooling : int
        Largest number of indices in one bag; bounds the exact accumulator.
    max_bags : int
        Largest number of bags (samples x tables) in one descriptor.
    fixed, pmem, link :
        Arithmetic format and timings, see the classes.
    cache_ids : int
        CXL.cache command queue ids, the device's outstanding host requests.
    cache_timeout : int
        Cycles the device waits for the host to answer a CXL.cache request
        before it fails the request (and the descriptor that made it); a
        power of two. 65,536 cycles is 262 us at 250 MHz, far beyond any
        answer a working host gives.
    host_window : int
        Lines in flight for each stream an engine reads from host memory (indices,
        offsets, deltas, the MLP's staged copy). 32 covers a read's round trip over the
        link and host memory (about 60 cycles) at the link's rate with the streams of a
        coalesced update sharing it (8 left the update waiting for its deltas: 9.7
        cycles a row at 10^5 rows and batches of 2048, 7 with 32).
    desc_depth : int
        Descriptors the control window queues.
    log_lines, commit_lines, snapshot_lines : int
        Sizes of the protected PMEM regions (undo log ring, commit records and
        each of the two MLP snapshot slots). ``log_lines = 0`` sizes the ring
        for two batches of ``model.batch_size`` samples in the worst case
        (every index a distinct row; see :attr:`log_size`); ``snapshot_lines =
        0`` fits the MLP parameters (:attr:`snapshot_size`).
    log_buffer : int
        Lines the undo logger buffers between the lookup's row reads and its
        log writes. PMEM writes are much slower than reads, so the buffer
        should hold a batch's old rows: the lookup then never waits for the
        log, which drains while the GPU computes.
    stamp_bits : int or None
        The undo logger's per-row stamp. ``None``: the full generation and
        batch (48 bits a table line, never cleared). An integer E in [6, 16]:
        an epoch of E bits, cleared in ``table_lines`` cycles after each reset
        and scrubbed in the background, so that large tables fit block RAM
        (boards).
    hdm_base : int
        Host physical line address (address / 64) where device memory begins.
    defer_depth : int
        Rows a relaxed lookup can defer (docs/relaxed-lookup.md).
    relaxed_lookup : bool
        Train in relaxed order (host side only).
    blocks : tuple of str
        The optional blocks the device is built with (:data:`BLOCKS`): the
        CXL link timing model, the update engine, the checkpoint engine with
        its undo logger, and ``relaxed``: the lookup engine's support for
        relaxed order (its row marks, deferred list and ``FINISH``). The
        CXL.mem target, PMEM controller, lookup engine and control window are
        always there. FPGA boards leave the rest out; descriptors for a missing
        engine, and relaxed ``LOOKUP`` and ``FINISH`` without ``relaxed``,
        complete with ``BAD_OP``.
    register_slices : bool
        A register slice in front of every PMEM and CXL.cache port and after
        the CXL.mem target's request merge. Each access takes one cycle more,
        and a port takes a request every other cycle at most (its slice cuts
        ``ready`` too); the long combinational paths from an engine's request
        through the arbiters and back are cut, which an FPGA's clock needs
        (docs/boards.md). Registered too, a cycle later: a slice between
        the doorbell queue and the dispatcher, the PMEM controller's read
        hazard check, recovery's verdict on each line it reads, and the undo
        logger's stamp check (a row's first read waits a cycle more), the
        update engine's question whether a row was logged
        (:attr:`log_query_latency`) and its answers to the lookup, the PMEM
        controller's issue of the request it took and whether a write slot is
        free, the update's read-modify-write requests and their history
        check, the bag checks, the CXL.mem target's decode and responses, the
        CXL.cache agent's requests and answers, the checkpoint engine's
        restart of the logger and its durable batch, the host's register
        accesses and their read values, and the CXL.mem target's error log
        (docs/design-notes.md lists them all). Off in the simulation
        presets, so their cycle counts stay comparable.
    gpu_window : bool
        The control window checks every array a descriptor names against the
        GPU window (``GPU_BASE``, ``GPU_LIMIT``; ``OUT_OF_WINDOW``). Off only
        where the logic does not fit (the 12F board): the two registers are
        then absent, so a host that sets a window gets an error, not a window
        that is not enforced.
    crc_folds : int
        Cycles the checkpoint blocks take to checksum a line (1, 2, 4 or 8):
        each cycle feeds ``512 / crc_folds`` bits through an XOR network that
        much smaller. The undo logger, the snapshot copy and recovery each hold
        a line for those cycles; 1 in the simulation presets.
    line_beats : int
        Beats a line moves in between the PMEM controller and its ports (1, 2,
        4 or 8): each port's requests, writes with their data and byte
        enables, cross in that many beats (a read in one), and a line read
        leaves the controller's read queue in as many on one bus to all the
        ports; each end puts the line together again. A bus of ``512 /
        line_beats`` bits then crosses the chip instead of 512
        (docs/design-notes.md). The cycles this takes are inside the
        configured ``pmem`` latencies (:attr:`read_beat_cycles`, which must
        leave room for them); a port takes a line every ``line_beats + 1``
        cycles at most. Needs :attr:`register_slices`; 1 (whole lines) in the
        simulation presets.
    media : str
        What holds the PMEM media: ``"bram"``, a memory inside the PMEM
        controller (simulation, and boards' block RAM), or ``"sdram"``, an SDR
        SDRAM chip of ``sdram``'s timing behind the controller's media port
        (a board's; its board system adds the SDRAM controller).
    sdram : SdramTiming
        The SDRAM chip, with ``media = "sdram"``.
    model, gpu, copy, host_pmem :
        The DLRM dense part, the GPU's timing, the cost of explicit DMA
        copies and of PMEM on the host's memory bus; host side only (they do
        not change the device, see :meth:`hardware_digest`).
    pool : PoolShape
        The devices the tables are spread over and the switch before them
        (host side only: each device is built from its own configuration,
        :func:`trainingcxl.spec.pool.device_configs`).
    """
    tables: tuple[int, ...] = (64, 64)
    dim: int = 16
    max_pooling: int = 8
    max_bags: int = 4096
    fixed: FixedPoint = field(default_factory=FixedPoint)
    pmem: PmemTiming = field(default_factory=PmemTiming)
    link: LinkTiming = field(default_factory=LinkTiming)
    cache_ids: int = 32
    cache_timeout: int = 1 << 16
    host_window: int = 32
    desc_depth: int = 4
    log_lines: int = 0
    commit_lines: int = 4
    snapshot_lines: int = 0
    log_buffer: int = 512
    stamp_bits: int | None = None
    hdm_base: int = 1 << 28          # byte address 16 GiB
    defer_depth: int = 1024
    relaxed_lookup: bool = False
    blocks: tuple[str, ...] = ("link", "update", "checkpoint", "relaxed")
    register_slices: bool = False
    gpu_window: bool = True
    crc_folds: int = 1
    line_beats: int = 1
    media: str = "bram"
    sdram: SdramTiming = field(default_factory=SdramTiming)
    model: ModelShape = field(default_factory=ModelShape)
    gpu: GpuTiming = field(default_factory=GpuTiming)
    copy: CopyTiming = field(default_factory=CopyTiming)
    host_pmem: HostPmemTiming = field(default_factory=HostPmemTiming)
    pool: PoolShape = field(default_factory=PoolShape)

    def __post_init__(self):
        _check(isinstance(self.tables, tuple) and 1 <= len(self.tables) <= 64,
               f"tables must be a tuple of 1 to 64 row counts, not {self.tables!r}")
        for t, rows in enumerate(self.tables):
            _check(isinstance(rows, int) and 1 <= rows <= (1 << 24),
                   f"tables[{t}] must be a row count in [1, 2**24], not {rows!r}")
        _check(isinstance(self.dim, int) and self.dim > 0 and (self.dim * 4) % LINE_BYTES == 0,
               f"dim must be a positive multiple of {LINE_BYTES // 4} so that a row is whole lines, not {self.dim!r}")
        _check(self.dim * 4 // LINE_BYTES <= 8,
               f"dim must be at most {8 * LINE_BYTES // 4} (8 lines per row), not {self.dim}")
        _check(isinstance(self.max_pooling, int) and 1 <= self.max_pooling <= (1 << self.fixed.guard_bits),
               f"max_pooling must be in [1, 2**fixed.guard_bits = {1 << self.fixed.guard_bits}], "
               f"not {self.max_pooling!r}")
        _check(isinstance(self.max_bags, int) and 1 <= self.max_bags <= (1 << 20),
               f"max_bags must be in [1, 2**20], not {self.max_bags!r}")
        # A pool's device holds some of the model's tables, or pieces of them (pool.split).
        _check(self.model.tables == 0 or self.model.tables > len(self.tables)
               or (self.pool.member and self.model.tables > 0),
               f"model.tables = {self.model.tables}: a pool's device holds some of the model's "
               f"tables, fewer than all ({len(self.tables)} here); 0 means this configuration's own")
        _check(isinstance(self.blocks, tuple) and set(self.blocks) <= set(BLOCKS)
               and len(set(self.blocks)) == len(self.blocks),
               f"blocks must be a list of distinct names among {', '.join(BLOCKS)}, "
               f"not {self.blocks!r}")
        _check("checkpoint" not in self.blocks or "update" in self.blocks,
               "the checkpoint block needs the update block (it logs what updates change)")
        _check(not self.relaxed_lookup or "relaxed" in self.blocks,
               "relaxed_lookup needs the relaxed block in blocks")
        _check(self.media in ("bram", "sdram"),
               f"media must be bram or sdram, not {self.media!r}")
        _check(self.media != "sdram" or self.media_lines <= self.sdram.lines,
               f"the media of {self.media_lines:,} lines does not fit the SDRAM's "
               f"{self.sdram.lines:,}")
        _check(self.crc_folds in (1, 2, 4, 8),
               f"crc_folds must be 1, 2, 4 or 8 (cycles per line checksum), not {self.crc_folds!r}")
        _check(self.line_beats in (1, 2, 4, 8),
               f"line_beats must be 1, 2, 4 or 8 (beats a line moves in), not {self.line_beats!r}")
        _check(self.line_beats == 1 or self.register_slices,
               "line_beats above 1 needs register_slices (the beats replace the port slices)")
        _check(not self.pmem.buffer_lines or self._buffer_possible,
               "pmem.buffer_lines (the energy-backed write buffer) needs the media inside the "
               "device (media = bram) and no register slices; set pmem.buffer_lines=0")
        for kind in ("read", "write"):
            have, floor = getattr(self.pmem, f"{kind}_latency"), getattr(self, f"min_{kind}_latency")
            _check(have >= floor,
                   f"pmem.{kind}_latency of {have} cycles leaves no room for the {kind} path of "
                   f"this device ({floor} cycles with its register slices and line_beats)")
        for name in ("relaxed_lookup", "register_slices", "gpu_window"):
            _check(isinstance(getattr(self, name), bool),
                   f"{name} must be true or false, not {getattr(self, name)!r}")
        _check(isinstance(self.cache_timeout, int) and 64 <= self.cache_timeout <= (1 << 24)
               and (self.cache_timeout & (self.cache_timeout - 1)) == 0,
               f"cache_timeout must be a power of two in [64, 2**24] cycles, "
               f"not {self.cache_timeout!r}")
        for name in ("cache_ids", "host_window", "desc_depth", "defer_depth"):
            v = getattr(self, name)
            limit = 65536 if name == "defer_depth" else 256
            _check(isinstance(v, int) and v >= 2 and (v & (v - 1)) == 0 and v <= limit,
                   f"{name} must be a power of two in [2, {limit}], not {v!r}")
        for name in ("log_lines", "snapshot_lines"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 0,
                   f"{name} must be a non-negative integer (0: sized automatically), not {v!r}")
        _check(isinstance(self.commit_lines, int) and 2 <= self.commit_lines <= 1024,
               f"commit_lines must be in [2, 1024] (a torn commit record must leave the one "
               f"before it), not {self.commit_lines!r}")
        _check(self.log_size >= 2 * self.group_lines,
               f"log_lines = {self.log_lines} holds fewer than two undo groups of "
               f"{self.group_lines} lines")
        _check(self.snapshot_size >= 2,
               f"snapshot_lines must be at least 2 (a header and data), not {self.snapshot_lines}")
        _check(isinstance(self.log_buffer, int) and self.log_buffer >= 4
               and (self.log_buffer & (self.log_buffer - 1)) == 0 and self.log_buffer <= 4096,
               f"log_buffer must be a power of two in [4, 4096], not {self.log_buffer!r}")
        _check(self.stamp_bits is None or (isinstance(self.stamp_bits, int)
                                           and 6 <= self.stamp_bits <= 16),
               f"stamp_bits must be none or an integer in [6, 16], not {self.stamp_bits!r}")
        _check(isinstance(self.hdm_base, int) and self.hdm_base >= 0
               and self.hdm_base % self.media_lines_pow2 == 0 and self.hdm_base < (1 << 46),
               f"hdm_base must be a line address aligned to the media size "
               f"({self.media_lines_pow2} lines), not {self.hdm_base!r}")

    # -- derived geometry -----------------------------------------------------------

    @property
    def n_tables(self):
        return len(self.tables)

    @property
    def model_tables(self):
        """Embedding tables the model's interaction sees: all of the pool's."""
        return self.model.tables or self.n_tables

    @property
    def lines_per_row(self):
        return self.dim * 4 // LINE_BYTES

    @property
    def elems_per_line(self):
        return LINE_BYTES // 4

    @property
    def table_base(self):
        """Media line address of each table's first row."""
        bases, at = [], 0
        for rows in self.tables:
            bases.append(at)
            at += rows * self.lines_per_row
        return tuple(bases)

    @property
    def table_lines(self):
        return sum(self.tables) * self.lines_per_row

    # -- checkpoint regions -------------------------------------------------------------

    @property
    def group_lines(self):
        """Lines of one slot of the undo log ring: a group line, then the data lines of
        up to :data:`GROUP_RECORDS` records (spec/records.py)."""
        return 1 + GROUP_RECORDS * self.lines_per_row

    def records_per_batch(self, batch_size):
        """Most undo records one batch can need: one per distinct row it touches."""
        return min(sum(self.tables), batch_size * self.n_tables * self.max_pooling)

    @staticmethod
    def groups_for(records):
        """Most ring slots a batch of ``records`` undo records takes: full groups, and one
        more for a group an ``UPDATE`` closes early (one of a batch looked up while the
        one before it updates, in relaxed order)."""
        return -(-records // GROUP_RECORDS) + 1 if records else 0

    @property
    def _buffer_possible(self):
        # The buffer writes the internal media; the boards' media is outside, behind
        # register slices, and keeps the volatile queue.
        return self.media == "bram" and not self.register_slices

    @property
    def buffer_size(self):
        """Lines the energy-backed write buffer holds for the media (``pmem.buffer_lines``;
        0: no buffer). Automatic (None): the lines a batch of ``max_bags`` bags can write
        at most (every index a distinct row, no more than the tables hold), rounded up to
        a power of two and capped at :data:`BUFFER_CAP`: a batch's writes drain while the
        next batch is looked up and trained, and the buffer is sized by the batch, not by
        the tables (docs/design.md, "Failure model")."""
        if self.pmem.buffer_lines is not None:
            return self.pmem.buffer_lines
        # It is the checkpoint scheme's persistence domain: a device without the
        # checkpoint engine (the 12F's pooling device) keeps the volatile queue.
        if not self._buffer_possible or "checkpoint" not in self.blocks:
            return 0
        batch = min(self.max_bags * self.max_pooling, sum(self.tables)) * self.lines_per_row
        return min(BUFFER_CAP, 1 << max(0, (batch - 1).bit_length()))

    def snapshot_period(self, staleness):
        """Batches between the starts of two MLP snapshot pulls with staleness bound
        ``staleness`` (K): K + 1, the fewest the bound allows; behind the energy-backed
        buffer with K of 2 or more, K: a pull is persistent within the batch after it
        starts, so starting it a batch early keeps every lookup from waiting for it."""
        return staleness + 1 - int(bool(self.buffer_size) and staleness > 1)

    @property
    def log_size(self):
        """Lines of the undo log ring (``log_lines``, or automatic when 0).

        The ring must hold two batches: training stalls the next lookup until
        every committed batch is durable, so only the running batch and, in
        relaxed order, the one looked up early hold live records."""
        if self.log_lines:
            return self.log_lines
        # A device of a pool also keeps the batches the slowest device has not made
        # durable yet, a batch or two more (``PoolShape.member``).
        batches = 4 if self.pool.member else 2
        return batches * self.groups_for(self.records_per_batch(self.model.batch_size)) * self.group_lines

    @property
    def log_groups(self):
        """Slots of the undo log ring, a group each."""
        return self.log_size // self.group_lines

    @property
    def mlp_params(self):
        """Number of MLP parameters (float32) of ``model``, as :class:`DenseModel` lays them out."""
        shape = self.model
        n_vec = self.model_tables + 1
        bottom = (shape.dense_features, *shape.bottom_hidden, self.dim)
        top = (self.dim + n_vec * (n_vec - 1) // 2, *shape.top_hidden, 1)
        return sum(i * o + o for dims in (bottom, top) for i, o in zip(dims, dims[1:]))

    @property
    def mlp_lines(self):
        return -(-self.mlp_params * 4 // LINE_BYTES)

    @property
    def snapshot_size(self):
        """Lines of each snapshot slot: a header line, then the parameters."""
        return self.snapshot_lines or self.mlp_lines + 1

    @property
    def log_base(self):
        return self.table_lines

    @property
    def commit_base(self):
        return self.log_base + self.log_size

    @property
    def ring_base(self):
        """Media line of the undo ring's :data:`RING_HEADERS` headers, after the commit records:
        the newest persistent record, so that ``RECOVER`` reads no more of the ring than it
        rolls back (spec/records.py)."""
        return self.commit_base + self.commit_lines

    @property
    def snapshot_base(self):
        """Media line addresses of snapshot slots A and B."""
        a = self.ring_base + RING_HEADERS
        return (a, a + self.snapshot_size)

    @property
    def media_lines(self):
        return self.snapshot_base[1] + self.snapshot_size

    @property
    def media_lines_pow2(self):
        return 1 << max(0, (self.media_lines - 1).bit_length())

    @property
    def media_addr_bits(self):
        return max(1, (self.media_lines - 1).bit_length())

    @property
    def min_read_latency(self):
        """The fewest cycles a PMEM read can take in this device's controller: a
        media read and a buffered FIFO (4), or two cycles of ageing after the
        port's slice, hazard check and issue register (3 with
        :attr:`register_slices`) and the read's beats (:attr:`read_beat_cycles`)."""
        return max(4, 2 + 3 * self.register_slices + self.read_beat_cycles)

    @property
    def min_write_latency(self):
        """The fewest cycles a PMEM write can spend before it is persistent: two
        cycles of ageing after the port's slice and take (2 with
        :attr:`register_slices`) and the request's beat (:attr:`request_beat_cycles`);
        in beats, its line must be in the write-pending queue, a beat a cycle
        after the take, before it may leave."""
        floor = 2 + 2 * self.register_slices + self.request_beat_cycles
        if self.line_beats > 1:
            floor = max(floor, 2 + self.request_beat_cycles + self.line_beats)
        return max(4, floor)

    @property
    def request_beat_cycles(self):
        """Cycles a PMEM request spends in beats after its port took it: the
        register of its last beat (:attr:`line_beats` above 1), else 0."""
        return int(self.line_beats > 1)

    @property
    def read_beat_cycles(self):
        """Cycles of a PMEM read spent in beats: its request's, its line's
        :attr:`line_beats` and one to put the line together; 0 for whole lines."""
        return self.request_beat_cycles + self.line_beats + 1 if self.line_beats > 1 else 0

    @property
    def log_query_latency(self):
        """Cycles from the update engine's question whether the undo logger took a row to
        the answer: 1, or 4 with :attr:`register_slices` (the question, the word read
        and the answer each pass a register, so that neither the update's checks nor
        its decisions share a path with the stamp RAM, which spreads over the whole
        chip, and its read multiplexer is a path of its own)."""
        return 4 if self.register_slices else 1

    @property
    def row_bits(self):
        """Width of a row index (the largest table's)."""
        return max(1, (max(self.tables) - 1).bit_length())

    @property
    def table_bits(self):
        return max(1, (self.n_tables - 1).bit_length())

    # -- serialisation --------------------------------------------------------------

    def to_dict(self):
        return dataclasses.asdict(self)

    def to_json(self):
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d):
        _check(isinstance(d, dict), f"a configuration is a table of fields, not {d!r}")
        d = dict(d)
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        _check(not unknown, f"unknown configuration keys: {', '.join(sorted(map(str, unknown)))}")
        sub = {"fixed": FixedPoint, "pmem": PmemTiming, "link": LinkTiming,
               "model": ModelShape, "gpu": GpuTiming, "copy": CopyTiming,
               "host_pmem": HostPmemTiming, "sdram": SdramTiming, "pool": PoolShape}
        for key, klass in sub.items():
            if key in d:
                _check(isinstance(d[key], dict),
                       f"{key} must be a table of {klass.__name__} fields, not {d[key]!r}")
                v = dict(d[key])
                bad = set(v) - {f.name for f in dataclasses.fields(klass)}
                _check(not bad, f"unknown keys in {key}: {', '.join(sorted(map(str, bad)))}")
                for k, x in v.items():
                    if isinstance(x, list):
                        v[k] = tuple(x)
                d[key] = _construct(klass, v, key)
        for key in ("tables", "blocks"):
            if key in d:
                _check(isinstance(d[key], (list, tuple)), f"{key} must be a list, not {d[key]!r}")
                d[key] = tuple(d[key])
        return _construct(cls, d, "configuration")

    @classmethod
    def from_json(cls, text):
        return cls.from_dict(json.loads(text))

    def digest(self):
        """Short stable hash of the whole configuration."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:12]

    def hardware_digest(self):
        """Hash of the fields the device is built from (not the host-only ``model`` and
        ``gpu``): the key of cached Verilog and simulator builds."""
        d = {k: v for k, v in self.to_dict().items()
             if k not in ("model", "gpu", "copy", "host_pmem", "pool", "relaxed_lookup")}
        # Automatic region sizes follow the model; the resolved sizes are hardware.
        d["log_lines"], d["snapshot_lines"] = self.log_size, self.snapshot_size
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def with_media(self, name):
        """This configuration on the media profile ``name`` (:data:`MEDIA_PROFILES`): the
        PMEM model's latencies and rates, which ``host-pmem``'s CPU reaches too."""
        _check(name in MEDIA_PROFILES, f"unknown media profile {name!r}; the profiles are "
               f"{', '.join(MEDIA_PROFILES)}")
        return self.replace(pmem=dataclasses.replace(self.pmem, **MEDIA_PROFILES[name].timing()))

    @property
    def media_profile(self):
        """The name of the media profile ``pmem`` follows, or ``"custom"``."""
        for name, profile in MEDIA_PROFILES.items():
            if all(getattr(self.pmem, k) == v for k, v in profile.timing().items()):
                return name
        return "custom"

    def with_overrides(self, assignments):
        """This configuration with ``FIELD=VALUE`` or ``GROUP.FIELD=VALUE`` assignments
        applied (``host_pmem.cores=6``, ``pmem.read_latency=80``, ``dim=32``); a
        value is read as JSON (numbers, lists, ``true``), else as a string.
        :class:`ConfigError` says what is wrong."""
        d = self.to_dict()
        for text in assignments:
            key, sep, value = text.partition("=")
            _check(sep and key, f"{text!r}: expected FIELD=VALUE or GROUP.FIELD=VALUE")
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                pass
            *groups, name = key.split(".")
            _check(len(groups) <= 1, f"{key!r}: at most one group (GROUP.FIELD)")
            target = d
            for g in groups:
                _check(isinstance(d.get(g), dict), f"{key!r}: {g!r} is not a group of fields "
                       f"({', '.join(k for k, v in d.items() if isinstance(v, dict))})")
                target = d[g]
            _check(name in target, f"{key!r}: no field {name!r}"
                   + (f" in {groups[0]}" if groups else ""))
            target[name] = value
        return Config.from_dict(d)

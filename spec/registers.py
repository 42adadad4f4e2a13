"""The control window's register map, declared once as data.

Every register is a :class:`Register`: a name, a word address (64-bit
registers, numbered in 8-byte words), an access mode, a kind and its fields.
The gateware (``hdl/control.py``, ``hdl/top.py``) builds its decoder and its
packed status words from these declarations (:attr:`Register.layout` is an
``amaranth.lib.data`` layout); the drivers encode and decode values with
:meth:`Register.encode` and :meth:`Register.decode`; the documentation's
register table is generated from :data:`REGISTERS`. Nothing else in the
project spells a register address or a bit position.

Kinds (:class:`Kind`):

* ``CONST``: fixed when the device is built (identity, geometry);
* ``CONTROL``: written by the host (descriptor staging, configuration);
* ``STATUS``: state of the device, read by the host (may change any cycle);
* ``COUNTER``: a performance counter the driver snapshots around a run
  (:data:`COUNTERS`); they restart at 0 on every power-up;
* ``DIAGNOSTIC``: error tallies and logs, read when something went wrong.
"""

import enum
from dataclasses import dataclass
from types import SimpleNamespace

from amaranth.lib import data

__all__ = ["Access", "Kind", "Field", "Register", "REGISTERS", "Reg", "REG", "COUNTERS",
           "DEVICE_MAGIC", "REGISTER_MAP_VERSION", "DEVICE_ID", "constants", "register"]

#: ``ID``'s upper half: "TCXL".
DEVICE_MAGIC = 0x5443584C
#: ``ID``'s lower half; changes when an existing register changes meaning.
REGISTER_MAP_VERSION = 1


class Access(enum.Enum):
    RO = "RO"       # read only; writes are ignored
    RW = "RW"       # read and write
    W = "W"         # write only; reads return 0


class Kind(enum.Enum):
    CONST = "const"
    CONTROL = "control"
    STATUS = "status"
    COUNTER = "counter"
    DIAGNOSTIC = "diagnostic"


@dataclass(frozen=True)
class Field:
    """``width`` bits from bit ``offset`` of a register."""
    name: str
    offset: int
    width: int
    doc: str = ""

    @property
    def mask(self):
        return (1 << self.width) - 1


@dataclass(frozen=True)
class Register:
    """One 64-bit register of the control window.

    A register without declared fields has one field, ``value``, of 64 bits
    (32 for a counter whose count fits).
    """
    name: str
    addr: int
    access: Access
    kind: Kind
    doc: str
    fields: tuple = ()

    def __post_init__(self):
        if not self.fields:
            object.__setattr__(self, "fields", (Field("value", 0, 64),))
        at = -1
        for f in self.fields:
            assert f.offset > at and f.offset + f.width <= 64, f"{self.name}.{f.name} overlaps"
            at = f.offset + f.width - 1

    def __int__(self):
        return self.addr

    def __index__(self):
        return self.addr

    def field(self, name):
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r}; its fields are "
                       f"{', '.join(f.name for f in self.fields)}")

    def encode(self, **values):
        """The register value with these fields set (the others 0); every value must fit."""
        word = 0
        for name, value in values.items():
            f = self.field(name)
            value = int(value)
            if not 0 <= value <= f.mask:
                raise ValueError(f"{self.name}.{name} = {value} does not fit {f.width} bits")
            word |= value << f.offset
        return word

    def decode(self, word):
        """``{field: value}`` of a value read from the register."""
        return {f.name: word >> f.offset & f.mask for f in self.fields}

    def get(self, word, name):
        f = self.field(name)
        return word >> f.offset & f.mask

    @property
    def layout(self):
        """The register as an ``amaranth.lib.data`` layout of 64 bits, field by field."""
        return data.FlexibleLayout(64, {f.name: data.Field(f.width, f.offset)
                                        for f in self.fields})


def _r(name, addr, access, kind, doc, *fields):
    return Register(name, addr, Access[access], Kind[kind], doc,
                    tuple(Field(*f) for f in fields))


def _counter(name, addr, doc):
    return _r(name, addr, "RO", "COUNTER", doc)


def _valid_batch(name, addr, doc):
    return _r(name, addr, "RO", "STATUS", doc,
              ("batch", 0, 32, "batch id"), ("valid", 32, 1, "the batch field holds one"))


def _error_log(k):
    return (
        _r(f"MEM_ERROR_LOG{k}_ADDR", 0x50 + 2 * k, "RO", "DIAGNOSTIC",
           f"line address of the CXL.mem error log's record {k} (0: newest)"),
        _r(f"MEM_ERROR_LOG{k}", 0x51 + 2 * k, "RO", "DIAGNOSTIC",
           f"record {k} of the CXL.mem error log; 0 while the record is empty",
           ("kind", 0, 3, "why the request was refused (MemError)"),
           ("tag", 8, 16, "the request's tag"),
           ("seq", 32, 32, "its number among all refusals, from 1")),
    )


#: The register map, in address order.
REGISTERS = (
    _r("ID", 0x00, "RO", "CONST", "identity of the device and version of this map",
       ("version", 0, 32, "REGISTER_MAP_VERSION"), ("magic", 32, 32, "DEVICE_MAGIC, \"TCXL\"")),
    _r("GEOMETRY", 0x01, "RO", "CONST", "the embedding tables the device was built for",
       ("tables", 0, 8, "number of tables"), ("dim", 8, 16, "elements per row"),
       ("lines_per_row", 24, 8, "lines per row"),
       ("frac_bits", 32, 8, "fraction bits of an element"),
       ("max_pooling", 40, 24, "most indices in one bag")),
    _r("HDM_BASE", 0x02, "RO", "CONST", "host line address where device memory begins"),
    _r("MEDIA", 0x03, "RO", "CONST", "sizes of the media",
       ("media_lines", 0, 32, "lines of media in all"),
       ("table_lines", 32, 32, "lines of the embedding tables")),
    _r("LIMITS", 0x04, "RO", "CONST", "descriptor limits",
       ("max_bags", 0, 32, "most bags in one descriptor"),
       ("desc_depth", 32, 32, "descriptors the doorbell queue holds")),
    _r("DESC_OP", 0x08, "RW", "CONTROL", "the staged descriptor's operation",
       ("op", 0, 4, "operation (Op)"),
       ("relaxed", 8, 1, "LOOKUP: defer the rows the previous batch's update changes"),
       ("nolog", 9, 1, "LOOKUP: do not log the rows read"),
       ("coalesced", 10, 1, "UPDATE: each row once, one bag per row"),
       ("batch", 32, 32, "batch id")),
    _r("DESC_SIZE", 0x09, "RW", "CONTROL", "the staged descriptor's sizes",
       ("n_bags", 0, 24, "bags (samples x tables)"),
       ("reserved", 24, 8, "must be 0 (BAD_SIZE otherwise)"),
       ("n_indices", 32, 32, "indices")),
    _r("DESC_IDX", 0x0A, "RW", "CONTROL", "byte address of the indices (64-byte aligned)"),
    _r("DESC_OFF", 0x0B, "RW", "CONTROL", "byte address of the offsets (64-byte aligned)"),
    _r("DESC_VEC", 0x0C, "RW", "CONTROL",
       "byte address of the vectors: pooled output, or the deltas of an UPDATE (64-byte aligned)"),
    _r("DOORBELL", 0x0D, "W", "CONTROL", "any write submits the staged descriptor"),
    _r("GPU_BASE", 0x0E, "RW", "CONTROL",
       "byte address where the GPU window begins: descriptors' arrays must lie in the window "
       "(absent without Config.gpu_window)"),
    _r("GPU_LIMIT", 0x0F, "RW", "CONTROL",
       "byte address where the GPU window ends (exclusive); after a reset, all host memory "
       "below HDM_BASE"),
    _r("STATUS", 0x10, "RO", "STATUS", "the descriptor queue and the engines",
       ("busy", 0, 1, "an engine works or a descriptor is queued"),
       ("queue_full", 1, 1, "the doorbell queue is full"),
       ("queue_level", 8, 16, "descriptors queued")),
    _r("SUBMITTED", 0x11, "RO", "STATUS", "descriptors accepted by the doorbell since power-up"),
    _r("COMPLETED", 0x12, "RO", "STATUS", "descriptors completed (with or without error)"),
    _r("LAST_DONE", 0x13, "RO", "STATUS", "the last completion",
       ("batch", 0, 32, "its batch id"), ("op", 32, 4, "its operation (Op)"),
       ("error", 40, 8, "its error code (ErrorCode)")),
    _r("ERROR", 0x14, "RW", "STATUS", "errors since last cleared; a write clears them",
       ("code", 0, 8, "first error code (ErrorCode)"), ("count", 32, 32, "errors")),
    _r("CYCLES", 0x18, "RO", "COUNTER", "cycles since the last power-up"),
    _counter("LOOKUP_BUSY", 0x19, "cycles the lookup engine was busy"),
    _counter("LOOKUP_LINES", 0x1A, "PMEM lines the lookup engine read"),
    _counter("LOOKUP_BAGS", 0x1B, "bags pooled"),
    _counter("LOOKUP_OVERFLOWS", 0x1C, "bags whose pooled vector overflowed"),
    _counter("PMEM_READS", 0x1D, "media lines read"),
    _counter("PMEM_WRITES", 0x1E, "media lines written (persisted)"),
    _counter("CACHE_READS", 0x1F, "host lines read over CXL.cache"),
    _counter("CACHE_WRITES", 0x20, "host lines written over CXL.cache"),
    _counter("MEM_ERRORS", 0x21, "CXL.mem requests refused"),
    _r("MEM_LAST_ERROR", 0x22, "RO", "DIAGNOSTIC", "the last CXL.mem refusal",
       ("kind", 0, 3, "why (MemError)"), ("tag", 8, 16, "the request's tag"),
       ("addr", 24, 40, "its line address")),
    _counter("UPDATE_BUSY", 0x23, "cycles the update engine was busy"),
    _counter("UPDATE_LINES", 0x24, "PMEM lines the update engine rewrote"),
    _counter("UPDATE_FORWARDED", 0x25,
             "of those, lines that took a forwarded value (a hazard resolved on chip)"),
    _r("IRQ_ACK", 0x28, "RW", "CONTROL",
       "completions the host has seen; the irq line is high while COMPLETED differs"),
    _counter("LOOKUP_LOG_HOLDS", 0x29, "cycles a lookup row read waited for the undo logger"),
    _r("CKPT_CTRL", 0x30, "RW", "CONTROL", "checkpointing",
       ("enable", 0, 1, "the checkpoint engine logs, commits and snapshots"),
       ("host_owns", 1, 1, "when not enabled: the host may write the checkpoint regions"),
       ("staleness", 8, 8, "staleness bound K")),
    _r("MLP_ADDR", 0x31, "RW", "CONTROL", "byte address of the GPU's staged MLP copy (64-byte aligned)"),
    _r("MLP_LINES", 0x32, "RW", "CONTROL", "its length in lines"),
    _r("CKPT_STATE", 0x33, "RO", "STATUS", "the checkpoint engine",
       ("ready", 0, 1, "a RECOVER has run since power-up"),
       ("logging", 1, 1, "lookups log the rows they read"),
       ("snapshot_busy", 2, 1, "a snapshot pull is running"),
       ("snapshot_failed", 3, 1, "the last snapshot pull failed"),
       ("staleness", 8, 8, "K in force"), ("gen", 16, 16, "recovery generation"),
       ("live_records", 32, 32, "undo records not yet reclaimed")),
    _valid_batch("COMMITTED", 0x34, "newest committed batch"),
    _valid_batch("SNAPSHOT", 0x35, "newest valid snapshot's batch"),
    _valid_batch("DURABLE", 0x36, "newest durable batch"),
    _r("RECOVERED", 0x37, "RO", "STATUS", "result of the last RECOVER",
       ("d", 0, 32, "recovered batch D"), ("m", 32, 32, "snapshot batch m")),
    _r("RECOVERED_INFO", 0x38, "RO", "STATUS", "validity and work of the last RECOVER",
       ("d_valid", 0, 1, "D is valid"), ("m_valid", 1, 1, "m is valid"),
       ("lines_read", 2, 30, "media lines read (the rows rolled back, a line per "
                             "undo group, plus a constant)"),
       ("rolled_back", 32, 32, "undo records rolled back")),
    _counter("LOG_RECORDS", 0x39, "undo records written"),
    _counter("LOG_FULL", 0x3A, "cycles a row waited for a slot of the undo log ring"),
    _counter("CKPT_STALLS", 0x3B, "cycles a LOOKUP waited for the snapshot to come within K"),
    _counter("LOG_BARRIER", 0x3C, "cycles an UPDATE waited for its undo records to persist"),
    _counter("RECOVER_CYCLES", 0x3D, "cycles spent in RECOVER"),
    _counter("SNAPSHOT_LINES", 0x3E, "MLP lines pulled into snapshot slots"),
    _counter("MEDIA_LATE", 0x3F,
             "cycles the memory behind the PMEM media port (a board's SDRAM) was slower "
             "than the PMEM timing model; 0 while the model's timing holds, and with the "
             "media in block RAM"),
    _counter("LOOKUP_STALLS", 0x40, "busy cycles of the lookup engine without a PMEM read going out"),
    _counter("UPDATE_STALLS", 0x41,
             "busy cycles of the update engine without a PMEM read or write going out"),
    _counter("PMEM_READS_DATA", 0x42, "media lines read from the tables"),
    _counter("PMEM_READS_LOG", 0x43, "media lines read from the undo log and commit records"),
    _counter("PMEM_READS_SNAPSHOT", 0x44, "media lines read from the snapshot slots"),
    _counter("PMEM_WRITES_DATA", 0x45, "media lines written (persisted) to the tables"),
    _counter("PMEM_WRITES_LOG", 0x46, "media lines written to the undo log and commit records"),
    _counter("PMEM_WRITES_SNAPSHOT", 0x47, "media lines written to the snapshot slots"),
    _counter("LINK_TO_DEVICE", 0x48, "messages the link carried host to device"),
    _counter("LINK_TO_DEVICE_DATA", 0x49, "of those, data lines"),
    _counter("LINK_TO_HOST", 0x4A, "messages the link carried device to host"),
    _counter("LINK_TO_HOST_DATA", 0x4B, "of those, data lines"),
    _r("LINK_LATENCY", 0x4C, "RW", "CONTROL", "one-way latency of the link model in cycles",
       ("mem", 0, 12, "CXL.mem"), ("cache", 16, 12, "CXL.cache")),
    _counter("LOG_BUSY", 0x4D, "cycles the undo logger had rows to write or writes in flight"),
    _counter("SNAPSHOT_BUSY", 0x4E, "cycles a snapshot pull was in progress"),
    _r("CACHE_STRAYS", 0x4F, "RO", "DIAGNOSTIC",
       "CXL.cache messages dropped: they named no outstanding transaction"),
    *_error_log(0), *_error_log(1), *_error_log(2), *_error_log(3),
    _r("CACHE_TIMEOUTS", 0x58, "RO", "DIAGNOSTIC",
       "CXL.cache requests the host left unanswered (failed with an error)"),
    _r("POOL_DURABLE", 0x59, "RW", "CONTROL",
       "a device of a pool (Config.pool.member): the newest batch the host has seen durable "
       "on every device; the undo logger keeps every record of a later batch (after a "
       "reset: all ones, no limit; absent on a device of its own)"),
    _counter("PMEM_WRITES_BUFFERED", 0x5A,
             "lines written to the checkpoint region kept in the energy-backed buffer "
             "(Config.buffer_size above 0): persistent, never drained to the media"),
    _counter("PMEM_BACKLOG", 0x5B,
             "lines the energy-backed buffer holds for the media, not yet drained: a level, "
             "not a count, read with the counters so that a measured window's change in it "
             "is the writes taken in the window that the media has yet to make"),
)

#: Registers by name: ``REG.DESC_OP.encode(op=1, batch=7)``.
REG = SimpleNamespace(**{r.name: r for r in REGISTERS})

#: Register addresses by name, for code that only needs an address.
Reg = enum.IntEnum("Reg", [(r.name, r.addr) for r in REGISTERS])
Reg.__doc__ = "Register word addresses, derived from :data:`REGISTERS`."

#: The performance counters, in address order: what a driver's ``counters()`` reads.
COUNTERS = tuple(r for r in REGISTERS if r.kind is Kind.COUNTER)

#: Value of the ``ID`` register.
DEVICE_ID = REG.ID.encode(version=REGISTER_MAP_VERSION, magic=DEVICE_MAGIC)


def constants(config):
    """``{name: value}`` of the build-time constant registers of a device built from ``config``:
    what the device answers and what a driver checks it against."""
    return {
        "ID": DEVICE_ID,
        "GEOMETRY": REG.GEOMETRY.encode(
            tables=config.n_tables, dim=config.dim, lines_per_row=config.lines_per_row,
            frac_bits=config.fixed.frac_bits, max_pooling=config.max_pooling),
        "HDM_BASE": config.hdm_base,
        "MEDIA": REG.MEDIA.encode(media_lines=config.media_lines, table_lines=config.table_lines),
        "LIMITS": REG.LIMITS.encode(max_bags=config.max_bags, desc_depth=config.desc_depth),
    }


def register(key):
    """The :class:`Register` at an address or of a name (or a :class:`Reg`)."""
    if isinstance(key, Register):
        return key
    if isinstance(key, str):
        return getattr(REG, key)
    return _BY_ADDR[int(key)]


_BY_ADDR = {r.addr: r for r in REGISTERS}
assert len(_BY_ADDR) == len(REGISTERS), "two registers share an address"
assert len({r.name for r in REGISTERS}) == len(REGISTERS), "two registers share a name"

"""Line layouts of the checkpoint records, built from spec/records.py's field lists."""

from amaranth import *
from amaranth.lib import data

from trainingcxl.spec.config import LINE_BITS
from trainingcxl.spec.records import GROUP_FIELDS, GROUP_RECORDS, HEADER_FIELDS
from .crc import CRC_INIT, CRC_XOR, crc_line

__all__ = ["header_layout", "CSUM", "group_layout", "sealed_header", "entry_layout",
           "commit_layout", "record_layout", "verdict_layout", "line_layout", "read_plan_layout",
           "walk_layout", "fill_layout"]

#: The fields of every undo, commit and snapshot header, from bit 0 of the line.
header_layout = data.StructLayout(dict(HEADER_FIELDS))
#: The ``csum`` field's bits in a header line.
CSUM = slice(header_layout["csum"].offset, header_layout["csum"].offset + header_layout["csum"].width)

#: A record's entry in its group line: its media line and its checksum.
entry_layout = data.StructLayout({"addr": 32, "csum": 32})
#: An undo group's line: the common fields, then each record's media line and checksum.
group_layout = data.StructLayout({
    **dict(GROUP_FIELDS),
    "entries": data.ArrayLayout(entry_layout, GROUP_RECORDS),
})

# The messages between the recovery scanner's blocks (hdl/checkpoint/scanner.py).

#: A commit record's fields: the engine's COMMIT, or a recovery's seal.
commit_layout = data.StructLayout({"gen": 16, "batch": 32, "k": 8})
#: The undo record a walk checks: its group's fields, its LSN and row, the CRC of its lines.
record_layout = data.StructLayout({"gen": 16, "batch": 32, "lsn": 32, "addr": 32, "crc": 32})
#: A line read by a recovery, as received: its header, the CRC of the record so far, the
#: lines still to receive in the phase; in the walk, whether it ends a record the group
#: holds, and that record's entry and LSN.
line_layout = data.StructLayout({"hdr": header_layout, "crc": 32, "left": 32, "end": 1,
                                 "entry": entry_layout, "lsn": 32})
#: The verdict on a one-line record (commit, snapshot or ring header): the phase that read
#: it, whether its checksum holds, its header and the lines of the phase after it.
verdict_layout = data.StructLayout({"phase": range(4), "intact": 1, "hdr": header_layout,
                                    "left": 32})


def read_plan_layout(addr_bits):
    """A phase of one-line records to read: 0 commits, 1 snapshot headers, 2 ring headers."""
    return data.StructLayout({"phase": range(4), "addr": addr_bits, "lines": 32})


def walk_layout(addr_bits):
    """A walk back through the ring: the LSN after its newest record, the slot of its
    newest group, how many groups it may read."""
    return data.StructLayout({"end": 32, "slot": addr_bits, "groups": 32})


def sealed_header(m, *, magic, gen, batch, a=0, b=0, crc=CRC_INIT):
    """A header line with its checksum: the CRC register ``crc`` (after the record's
    data lines, if any) fed the header with ``csum`` zero (spec/records.py)."""
    if isinstance(crc, int):
        crc = Const(crc, 32)
    body = Signal(header_layout)
    m.d.comb += [body.magic.eq(magic), body.gen.eq(gen), body.batch.eq(batch),
                 body.a.eq(a), body.b.eq(b)]
    sealed = Signal(header_layout)
    m.d.comb += [sealed.eq(body), sealed.csum.eq(crc_line(m, crc, body.as_value()) ^ CRC_XOR)]
    return sealed.as_value()


def fill_layout(lines_per_row):
    """A walk's data line into the rollback buffer, at line ``index`` of its record."""
    return data.StructLayout({"index": range(max(2, lines_per_row)), "data": LINE_BITS})

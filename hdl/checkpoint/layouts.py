"""Line layouts of the checkpoint records, built from spec/records.py's field lists."""

from amaranth import *
from amaranth.lib import data

from trainingcxl.spec.records import GROUP_FIELDS, GROUP_RECORDS, HEADER_FIELDS
from .crc import CRC_INIT, CRC_XOR, crc_line

__all__ = ["header_layout", "CSUM", "group_layout", "sealed_header"]

#: The fields of every undo, commit and snapshot header, from bit 0 of the line.
header_layout = data.StructLayout(dict(HEADER_FIELDS))
#: The ``csum`` field's bits in a header line.
CSUM = slice(header_layout["csum"].offset, header_layout["csum"].offset + header_layout["csum"].width)

#: An undo group's line: the common fields, then each record's media line and checksum.
group_layout = data.StructLayout({
    **dict(GROUP_FIELDS),
    "entries": data.ArrayLayout(data.StructLayout({"addr": 32, "csum": 32}), GROUP_RECORDS),
})


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

"""On-media formats of the checkpoint engine, and their checksum.

The device's checkpoint engine (``hdl/checkpoint/``) and the host both read
this module, so the formats cannot drift apart. Every record ends in (or is)
one *header line* of the same layout (:data:`HEADER_FIELDS`, from bit 0 of the
512-bit line; the rest of the line is zero):

=========  ====  ==========================================================
field      bits  meaning
=========  ====  ==========================================================
``magic``  16    the kind of record (:data:`UNDO`, :data:`COMMIT`, :data:`SNAPSHOT`, :data:`RING`)
``gen``    16    recovery generation the record was written in
``batch``  32    batch id (ring header: the newest record's)
``a``      32    undo: log sequence number; commit: staleness bound K; snapshot: data lines;
                 ring header: the LSN of the next record (records so far in ``gen``)
``b``      32    undo: media line of the row's first line; snapshot: data checksum;
                 ring header: first media line of the slot of the next record
``csum``   32    checksum of the record with this field zero
=========  ====  ==========================================================

* **Undo record** (log ring, ``1 + lines_per_row`` lines per slot): the row's
  old contents, line by line, then the header. ``csum`` covers the data lines
  and the header, so a record torn anywhere (8-byte granularity) fails it.
* **Commit record** (commit region, one line per slot): the header alone.
* **Ring header** (:data:`~trainingcxl.spec.config.RING_HEADERS` lines at
  ``Config.ring_base``, written in turn): the header alone, written once every
  record before it is persistent and before any ``UPDATE`` may overwrite a row,
  so ``RECOVER`` walks the ring backwards from it and reads only the records it
  rolls back (and the one that ends the walk) instead of the whole ring.
* **Snapshot slot**: the header at the slot's first line, the MLP parameters
  (float32, little endian, :meth:`DenseModel.parameters` order) in the lines
  after it; ``b`` is the checksum of those data lines, ``csum`` the header's.

The checksum is CRC-32C (Castagnoli polynomial ``0x1EDC6F41``, initial value
and final XOR ``0xFFFFFFFF``) over whole lines, each line fed most significant
bit first (bit 511, the top bit of byte 63, first). It is not reflected, so
its values differ from the common byte-wise CRC-32C; the hardware computes a
line per cycle with an XOR network derived from :func:`crc_update`.
"""

from dataclasses import dataclass

from .config import LINE_BITS, LINE_BYTES

__all__ = ["HEADER_FIELDS", "UNDO", "COMMIT", "SNAPSHOT", "RING", "UNDO_GROUP", "GROUP_RECORDS",
           "GROUP_FIELDS", "CRC_POLY", "CRC_INIT", "CRC_XOR", "crc_update", "checksum", "Header",
           "undo_record", "undo_group", "decode_group", "commit_record", "snapshot_header",
           "ring_header", "decode_undo", "valid_header", "CSUM_MASK"]

#: Header line fields (name, bits), from bit 0.
HEADER_FIELDS = (("magic", 16), ("gen", 16), ("batch", 32), ("a", 32), ("b", 32), ("csum", 32))
UNDO = 0x5544         # "UD"
COMMIT = 0x434D       # "CM"
SNAPSHOT = 0x534E     # "SN"
RING = 0x5248         # "RH"
UNDO_GROUP = 0x5547   # "UG"

#: Undo records a group holds at most: their data lines, then one line of their headers.
GROUP_RECORDS = 6
#: The group line's common fields (name, bits), from bit 0; then ``GROUP_RECORDS``
#: entries of (``addr`` 32, ``csum`` 32).
GROUP_FIELDS = (("magic", 16), ("gen", 16), ("batch", 32), ("lsn", 32), ("count", 8))
_GROUP_COMMON = sum(bits for _, bits in GROUP_FIELDS)

CRC_POLY = 0x1EDC6F41
CRC_INIT = 0xFFFFFFFF
CRC_XOR = 0xFFFFFFFF
_MASK = 0xFFFFFFFF


def _byte_table():
    table = []
    for byte in range(256):
        c = byte << 24
        for _ in range(8):
            c = ((c << 1) ^ CRC_POLY) & _MASK if c & 0x80000000 else (c << 1) & _MASK
        table.append(c)
    return table


_TABLE = _byte_table()


def crc_update(state, line, nbytes=LINE_BYTES):
    """The CRC register after feeding one 512-bit line (no initial value or final XOR),
    most significant byte first; ``nbytes`` feeds a narrower value instead.

    Linear in ``(state, line)`` over GF(2), which is what lets the hardware
    compute it as an XOR network, a line at once or a part per cycle."""
    for k in range(nbytes - 1, -1, -1):
        byte = (line >> (8 * k)) & 0xFF
        state = ((state << 8) & _MASK) ^ _TABLE[((state >> 24) ^ byte) & 0xFF]
    return state


def checksum(lines):
    """CRC-32C of a sequence of line integers."""
    state = CRC_INIT
    for line in lines:
        state = crc_update(state, line)
    return state ^ CRC_XOR


@dataclass(frozen=True)
class Header:
    """A decoded header line."""
    magic: int
    gen: int
    batch: int
    a: int
    b: int
    csum: int

    def pack(self):
        line, at = 0, 0
        for name, bits in HEADER_FIELDS:
            value = getattr(self, name)
            assert 0 <= value < (1 << bits), f"{name} = {value} does not fit {bits} bits"
            line |= value << at
            at += bits
        return line

    @classmethod
    def unpack(cls, line):
        values, at = {}, 0
        for name, bits in HEADER_FIELDS:
            values[name] = (line >> at) & ((1 << bits) - 1)
            at += bits
        return cls(**values)

    def with_csum(self, csum):
        return Header(self.magic, self.gen, self.batch, self.a, self.b, csum)


def _sealed(header, data_lines=()):
    body = header.with_csum(0)
    return body.with_csum(checksum([*data_lines, body.pack()]))


def undo_record(*, gen, batch, lsn, addr, row_lines):
    """The lines of an undo record (data lines, then the header)."""
    header = _sealed(Header(UNDO, gen, batch, lsn, addr, 0), row_lines)
    return [*row_lines, header.pack()]


def commit_record(*, gen, batch, staleness=0):
    """A commit record; it also keeps the staleness bound K in force (``a``)."""
    return _sealed(Header(COMMIT, gen, batch, staleness, 0, 0)).pack()


def snapshot_header(*, gen, batch, data_lines):
    header = Header(SNAPSHOT, gen, batch, len(data_lines), checksum(data_lines), 0)
    return _sealed(header).pack()


def ring_header(*, gen, batch, next_lsn, next_slot):
    """A ring header: ``next_lsn`` records of generation ``gen`` were written and are
    persistent, the newest of ``batch``; the next goes to the slot at media line ``next_slot``."""
    return _sealed(Header(RING, gen, batch, next_lsn, next_slot, 0)).pack()


#: The ``csum`` field's bits in a header line.
CSUM_MASK = ((1 << 32) - 1) << 128


def decode_undo(lines):
    """``(Header, row_lines)`` of an undo record, or ``None`` if it is torn or no record.

    The checksum covers the header line as stored (with ``csum`` zeroed), so
    any bit of the line that differs from what was sealed, even beyond the
    fields, makes the record torn."""
    *data, last = lines
    header = Header.unpack(last)
    if header.magic != UNDO or checksum([*data, last & ~CSUM_MASK]) != header.csum:
        return None
    return header, data


def valid_header(line, magic):
    """The header of a commit record, snapshot or ring header line if it is intact, else ``None``."""
    header = Header.unpack(line)
    if header.magic != magic or checksum([line & ~CSUM_MASK]) != header.csum:
        return None
    return header


assert sum(bits for _, bits in HEADER_FIELDS) <= LINE_BITS


# -- packed undo records ---------------------------------------------------------------

def _record_csum(*, gen, batch, lsn, addr, row_lines):
    """A record's checksum: the same as :func:`undo_record`'s (its data lines and its
    header with ``csum`` zero), so a packed record checks itself as an unpacked one does."""
    return checksum([*row_lines, Header(UNDO, gen, batch, lsn, addr, 0).pack()])


def undo_group(*, gen, batch, lsn, records):
    """The lines of a group of undo records of one batch: every record's data lines in
    order, then one line holding the group's fields and, per record, its media line
    and checksum. ``records``: ``(addr, row_lines)`` pairs, 1 to :data:`GROUP_RECORDS`;
    the first record's log sequence number is ``lsn``, the next ones follow."""
    if not 1 <= len(records) <= GROUP_RECORDS:
        raise ValueError(f"a group holds 1 to {GROUP_RECORDS} records, not {len(records)}")
    line, at = 0, 0
    for (name, bits), value in zip(GROUP_FIELDS, (UNDO_GROUP, gen, batch, lsn, len(records))):
        line |= value << at
        at += bits
    data = []
    for k, (addr, row_lines) in enumerate(records):
        csum = _record_csum(gen=gen, batch=batch, lsn=lsn + k, addr=addr, row_lines=row_lines)
        line |= (addr | csum << 32) << (_GROUP_COMMON + 64 * k)
        data += row_lines
    return [*data, line]


def decode_group(line, data_lines):
    """The intact records of a group, newest first, as ``(Header, row_lines)`` like
    :func:`decode_undo`; ``data_lines(k)`` gives record ``k``'s data lines. A record
    whose checksum fails (torn data, a torn group line) is left out; a line that is
    no group gives ``[]``."""
    fields, at = {}, 0
    for name, bits in GROUP_FIELDS:
        fields[name] = (line >> at) & ((1 << bits) - 1)
        at += bits
    if fields["magic"] != UNDO_GROUP or not 1 <= fields["count"] <= GROUP_RECORDS:
        return []
    out = []
    for k in reversed(range(fields["count"])):
        entry = line >> (_GROUP_COMMON + 64 * k)
        addr, csum = entry & 0xFFFFFFFF, (entry >> 32) & 0xFFFFFFFF
        rows = data_lines(k)
        lsn = fields["lsn"] + k
        if _record_csum(gen=fields["gen"], batch=fields["batch"], lsn=lsn, addr=addr,
                        row_lines=rows) == csum:
            out.append((Header(UNDO, fields["gen"], fields["batch"], lsn, addr, csum), rows))
    return out


assert _GROUP_COMMON + 64 * GROUP_RECORDS <= LINE_BITS

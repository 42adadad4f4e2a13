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
``a``      32    undo: log sequence number (LSN); commit: staleness bound K; snapshot: data lines;
                 ring header: the LSN of the next record (records so far in ``gen``)
``b``      32    undo: media line of the row's first line; snapshot: data checksum;
                 ring header: first media line of the slot of the next group
``csum``   32    checksum of the record with this field zero
=========  ====  ==========================================================

* **Undo record**: a row's old contents, line by line, and a header that is
  never stored whole: ``a`` is the record's log sequence number (LSN), ``b``
  the row's first media line. Its checksum (:func:`record_csum`) covers the
  data lines and that header, so a record torn anywhere (8-byte granularity)
  fails it.
* **Undo group** (log ring, one group per slot of ``Config.group_lines`` =
  ``1 + GROUP_RECORDS * lines_per_row`` lines): up to :data:`GROUP_RECORDS`
  records of one batch with consecutive LSNs. The slot's first line is the
  *group line* (:data:`GROUP_FIELDS`: ``magic`` :data:`UNDO_GROUP`, ``gen``,
  ``batch``, the first record's ``lsn``, ``count``; then each record's
  ``addr`` and ``csum``, 64 bits a record); record ``k``'s data lines follow at
  ``1 + k * lines_per_row``. Six headers share a line, so a row of dim 16 costs
  7/6 log lines instead of 2. The group line is written once its records'
  data lines are persistent and after its last record; a group is closed when
  it is full, when the next row is of another batch, or when an ``UPDATE``
  waits for the log.
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

from .config import GROUP_RECORDS, LINE_BITS, LINE_BYTES

__all__ = ["HEADER_FIELDS", "UNDO", "COMMIT", "SNAPSHOT", "RING", "UNDO_GROUP", "GROUP_RECORDS",
           "GROUP_FIELDS", "GROUP_COMMON_BITS", "CRC_POLY", "CRC_INIT", "CRC_XOR", "crc_update",
           "checksum", "Header", "record_csum", "group_line", "undo_group", "decode_group_line",
           "decode_record", "commit_record", "snapshot_header", "ring_header", "valid_header",
           "CSUM_MASK"]

#: Header line fields (name, bits), from bit 0.
HEADER_FIELDS = (("magic", 16), ("gen", 16), ("batch", 32), ("a", 32), ("b", 32), ("csum", 32))
UNDO = 0x5544         # "UD"
COMMIT = 0x434D       # "CM"
SNAPSHOT = 0x534E     # "SN"
RING = 0x5248         # "RH"
UNDO_GROUP = 0x5547   # "UG"

#: The group line's common fields (name, bits), from bit 0; then ``GROUP_RECORDS``
#: entries of (``addr`` 32, ``csum`` 32).
GROUP_FIELDS = (("magic", 16), ("gen", 16), ("batch", 32), ("lsn", 32), ("count", 8))
GROUP_COMMON_BITS = sum(bits for _, bits in GROUP_FIELDS)

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


def valid_header(line, magic):
    """The header of a commit record, snapshot or ring header line if it is intact, else ``None``."""
    header = Header.unpack(line)
    if header.magic != magic or checksum([line & ~CSUM_MASK]) != header.csum:
        return None
    return header


assert sum(bits for _, bits in HEADER_FIELDS) <= LINE_BITS


# -- undo groups ----------------------------------------------------------------------

def record_csum(*, gen, batch, lsn, addr, row_lines):
    """An undo record's checksum: its data lines, then the header line it would have
    alone (``UNDO``, ``gen``, ``batch``, ``a`` = ``lsn``, ``b`` = ``addr``, ``csum``
    zero). The record checks itself inside a group, whatever its neighbours."""
    return checksum([*row_lines, Header(UNDO, gen, batch, lsn, addr, 0).pack()])


def group_line(*, gen, batch, lsn, entries):
    """A group line: the common fields, then ``(addr, csum)`` of each record."""
    if not 1 <= len(entries) <= GROUP_RECORDS:
        raise ValueError(f"a group holds 1 to {GROUP_RECORDS} records, not {len(entries)}")
    line, at = 0, 0
    for (name, bits), value in zip(GROUP_FIELDS, (UNDO_GROUP, gen, batch, lsn, len(entries))):
        assert 0 <= value < (1 << bits), f"{name} = {value} does not fit {bits} bits"
        line |= value << at
        at += bits
    for k, (addr, csum) in enumerate(entries):
        line |= (addr | csum << 32) << (GROUP_COMMON_BITS + 64 * k)
    return line


def undo_group(*, gen, batch, lsn, records):
    """The lines of a group of undo records of one batch, as a slot holds them: the
    group line, then every record's data lines in order. ``records``: ``(addr,
    row_lines)`` pairs, 1 to :data:`GROUP_RECORDS`; the first record's log sequence
    number is ``lsn``, the next ones follow."""
    entries = [(addr, record_csum(gen=gen, batch=batch, lsn=lsn + k, addr=addr, row_lines=rows))
               for k, (addr, rows) in enumerate(records)]
    line = group_line(gen=gen, batch=batch, lsn=lsn, entries=entries)
    return [line, *(row for _, rows in records for row in rows)]


def decode_group_line(line):
    """``(fields, entries)`` of a group line, or ``None`` if it is no group: ``fields``
    maps :data:`GROUP_FIELDS` names to values, ``entries`` lists ``(addr, csum)``."""
    fields, at = {}, 0
    for name, bits in GROUP_FIELDS:
        fields[name] = (line >> at) & ((1 << bits) - 1)
        at += bits
    if fields["magic"] != UNDO_GROUP or not 1 <= fields["count"] <= GROUP_RECORDS:
        return None
    entries = []
    for k in range(fields["count"]):
        entry = line >> (GROUP_COMMON_BITS + 64 * k)
        entries.append((entry & _MASK, (entry >> 32) & _MASK))
    return fields, entries


def decode_record(fields, entries, k, row_lines):
    """Record ``k`` of a decoded group as a :class:`Header` (``a`` its LSN, ``b`` its
    row's media line) if ``row_lines`` are its intact data, else ``None``."""
    addr, csum = entries[k]
    lsn = fields["lsn"] + k
    if record_csum(gen=fields["gen"], batch=fields["batch"], lsn=lsn, addr=addr,
                   row_lines=row_lines) != csum:
        return None
    return Header(UNDO, fields["gen"], fields["batch"], lsn, addr, csum)


assert GROUP_COMMON_BITS + 64 * GROUP_RECORDS <= LINE_BITS

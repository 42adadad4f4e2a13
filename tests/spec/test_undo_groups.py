"""Undo groups: up to six records of one batch in a slot, the group line first, then
their data lines; each record checks itself with the checksum it would have alone."""

import random

import pytest

from trainingcxl.spec.records import (GROUP_RECORDS, UNDO, Header, checksum, decode_group_line,
                                      decode_record, record_csum, undo_group)

RNG = random.Random(7)


def _records(n, lpr=1):
    return [(1000 + 37 * k, [RNG.getrandbits(512) for _ in range(lpr)]) for k in range(n)]


def _decode(lines, lpr=1):
    """The intact records of a slot's lines, newest first, as (lsn, addr, rows)."""
    got = decode_group_line(lines[0])
    if got is None:
        return []
    fields, entries = got
    out = []
    for k in reversed(range(len(entries))):
        rows = lines[1 + k * lpr:1 + (k + 1) * lpr]
        header = decode_record(fields, entries, k, rows)
        if header is not None:
            out.append((header.a, header.b, rows))
    return out


@pytest.mark.parametrize("lpr", [1, 2])
def test_a_group_holds_its_records_and_checks_each(lpr):
    recs = _records(GROUP_RECORDS, lpr)
    lines = undo_group(gen=3, batch=9, lsn=40, records=recs)
    assert len(lines) == 1 + GROUP_RECORDS * lpr          # 7 lines for 6 rows of dim 16
    assert _decode(lines, lpr) == [(40 + k, a, r) for k, (a, r) in reversed(list(enumerate(recs)))]
    # The checksum is that of the record's data lines and its header line alone.
    fields, entries = decode_group_line(lines[0])
    addr, rows = recs[2]
    alone = Header(UNDO, 3, 9, 42, addr, 0).pack()
    assert entries[2] == (addr, checksum([*rows, alone]))
    assert decode_record(fields, entries, 2, rows).a == 42


def test_torn_data_or_group_line_leaves_out_only_what_it_tears():
    recs = _records(4)
    lines = undo_group(gen=1, batch=2, lsn=0, records=recs)
    torn = list(lines)
    torn[3] ^= 1 << 77                                   # record 2's data line
    assert [lsn for lsn, _, _ in _decode(torn)] == [3, 1, 0]
    # Tearing the common fields (8 bytes of them) fails every record.
    assert _decode([lines[0] ^ (0xFF << 40), *lines[1:]]) == []
    # A flipped bit in record 1's checksum entry fails record 1 alone.
    flipped = [lines[0] ^ (1 << (104 + 64 + 40)), *lines[1:]]
    assert [lsn for lsn, _, _ in _decode(flipped)] == [3, 2, 0]
    # Not a group: a zero line, or a count out of range.
    assert decode_group_line(0) is None
    assert decode_group_line(lines[0] & ~(0xFF << 96)) is None


def test_a_group_is_one_to_six_records():
    for n in (0, GROUP_RECORDS + 1):
        with pytest.raises(ValueError, match="1 to 6 records"):
            undo_group(gen=0, batch=0, lsn=0, records=_records(n))
    # Log lines per record for dim 16: 2 alone, 7/6 in a full group (42% fewer).
    assert len(undo_group(gen=0, batch=0, lsn=0, records=_records(6))) / 6 == pytest.approx(7 / 6)
    assert record_csum(gen=0, batch=0, lsn=0, addr=0, row_lines=[0]) != record_csum(
        gen=0, batch=0, lsn=1, addr=0, row_lines=[0])

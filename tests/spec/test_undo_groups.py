"""Packed undo records: a group of up to six records of one batch, their data lines
then one line of their headers; each record checks itself as an unpacked one does."""

import random

import pytest

from trainingcxl.spec.records import (GROUP_RECORDS, UNDO, checksum, decode_group, decode_undo,
                                      undo_group, undo_record)

RNG = random.Random(7)


def _records(n, lpr=1):
    return [(1000 + 37 * k, [RNG.getrandbits(512) for _ in range(lpr)]) for k in range(n)]


@pytest.mark.parametrize("lpr", [1, 2])
def test_a_group_holds_what_its_records_would_and_checks_each(lpr):
    recs = _records(GROUP_RECORDS, lpr)
    lines = undo_group(gen=3, batch=9, lsn=40, records=recs)
    assert len(lines) == GROUP_RECORDS * lpr + 1          # 7 lines for 6 rows of dim 16
    got = decode_group(lines[-1], lambda k: lines[k * lpr:(k + 1) * lpr])
    assert [(h.a, h.b, rows) for h, rows in got] == [(40 + k, a, r) for k, (a, r) in reversed(list(enumerate(recs)))]
    # The same checksum as the record unpacked: one definition of an intact record.
    for h, rows in got:
        alone = undo_record(gen=3, batch=9, lsn=h.a, addr=h.b, row_lines=rows)
        assert decode_undo(alone)[0] == h and h.magic == UNDO


def test_torn_data_or_header_leaves_out_only_what_it_tears():
    recs = _records(4)
    lines = undo_group(gen=1, batch=2, lsn=0, records=recs)
    torn = list(lines)
    torn[2] ^= 1 << 77                                   # record 2's data line
    got = decode_group(torn[-1], lambda k: [torn[k]])
    assert [h.a for h, _ in got] == [3, 1, 0]
    # A torn group line (8 bytes of it) fails every record whose fields it covers.
    assert decode_group(lines[-1] ^ (0xFF << 8), lambda k: [lines[k]]) == []
    # A flipped bit in record 1's checksum entry fails record 1 alone.
    got = decode_group(lines[-1] ^ (1 << (104 + 64 + 40)), lambda k: [lines[k]])
    assert [h.a for h, _ in got] == [3, 2, 0]
    assert decode_group(0, lambda k: [0]) == []


def test_a_group_is_one_to_six_records():
    for n in (0, GROUP_RECORDS + 1):
        with pytest.raises(ValueError, match="1 to 6 records"):
            undo_group(gen=0, batch=0, lsn=0, records=_records(n))
    # Log lines per record for dim 16: 2 unpacked, 7/6 packed (42% fewer).
    assert len(undo_group(gen=0, batch=0, lsn=0, records=_records(6))) / 6 == pytest.approx(7 / 6)
    assert checksum([]) != checksum([0])

"""Two PMEM bounds of a batch: this scheme's, and the floor of exact recovery.

Both count the media traffic a batch cannot avoid and turn it into cycles at
the media's rates. The PMEM model reads and writes at independent rates
(``Config.pmem.read_rate`` and ``write_rate``), so neither bound can be beaten
by a system that overlaps one stream with the other: a bound is the slower of
its two streams. Both read each distinct row the batch touches once.

*The scheme's bound* (:attr:`BatchBound.cycles`) is the floor of undo logging
as the device does it: each distinct row written back once, an undo record of
its old value first (the row's lines and a share of a group line,
:data:`GROUP_RECORDS` records a group), a commit record, and the batch's share
of the MLP snapshots (one every ``Config.snapshot_period(K)`` batches, with the
staleness bound K). Behind an energy-backed write buffer (``Config.buffer_size``)
the undo records and commit records live in the buffer and never reach the media:
the bound is then the rows alone, written once. A system's cycles against it
say how close it comes to the media *with this scheme*.

*The floor of exact recovery* (:attr:`BatchBound.floor_cycles`) is what any
scheme that recovers every committed batch exactly must write to the media: each
distinct row once (its new value, somewhere the old one is not overwritten), and
with the media as the persistence domain also the least bytes that say where each
row's new value lives (:data:`ROW_ADDRESS_BYTES` a row), one commit line and the
snapshot share at the fewest snapshots K allows (one every K + 1 batches), which
a persistent buffer of their fixed size keeps instead. A scheme that writes the
new value out of place and redirects reads, or logs redo and applies it lazily,
could approach it; undo logging to the media writes each row twice and cannot.
"""

from dataclasses import dataclass

from trainingcxl.spec.config import GROUP_RECORDS, LINE_BYTES
from .regions import distinct_rows

__all__ = ["BatchBound", "WindowBound", "ROW_ADDRESS_BYTES", "batch_bound", "window_bounds",
           "window_bound"]

#: Bytes that say where one updated row's new value lives: its row number in the
#: tables, one 32-bit word. 32 bits name every row of every configuration here (the
#: scale ladder's largest holds 8 x 10^6 rows, 23 bits) with room for tables a
#: thousand times larger; 3 bytes would name today's and save a quarter of a term that
#: is 1/16 of a one-line row's own writes, so the floor hardly depends on the choice.
ROW_ADDRESS_BYTES = 4


@dataclass(frozen=True)
class BatchBound:
    """The media traffic a batch cannot avoid, and the cycles it takes at the media's
    rates: with this scheme's undo log (``lines_written``, ``write_cycles``,
    :attr:`cycles`) and at the floor of exact recovery (``floor_lines_written``,
    ``floor_write_cycles``, :attr:`floor_cycles`). Both read ``lines_read``."""
    rows: int
    lines_read: int
    lines_written: float
    read_cycles: float
    write_cycles: float
    floor_lines_written: float = 0.0
    floor_write_cycles: float = 0.0

    @property
    def cycles(self):
        """The scheme's bound: the slower of its read and write streams."""
        return max(self.read_cycles, self.write_cycles)

    @property
    def floor_cycles(self):
        """The floor of exact recovery: the slower of the reads and the floor's writes."""
        return max(self.read_cycles, self.floor_write_cycles)


def batch_bound(config, batch, *, staleness=0):
    """The :class:`BatchBound` of ``batch`` on ``config``'s media, with staleness bound
    ``staleness`` for the snapshots."""
    rows = distinct_rows(config, batch)
    lpr = config.lines_per_row
    data = rows * lpr
    # Behind the energy-backed buffer the checkpoint region (undo and commit records,
    # the MLP snapshot slots) stays there: only the rows reach the media.
    media = not config.buffer_size
    pull = (config.mlp_lines + 1) * media                   # header + parameters
    undo = (data + -(-rows // GROUP_RECORDS)) * media
    written = data + undo + media + pull / config.snapshot_period(staleness)
    where = -(-rows * ROW_ADDRESS_BYTES // LINE_BYTES) * media
    floor = data + where + media + pull / (staleness + 1)
    (r_lines, r_cycles), (w_lines, w_cycles) = config.pmem.read_rate, config.pmem.write_rate
    return BatchBound(rows=rows, lines_read=data, lines_written=written,
                      read_cycles=data * r_cycles / r_lines,
                      write_cycles=written * w_cycles / w_lines,
                      floor_lines_written=floor, floor_write_cycles=floor * w_cycles / w_lines)


@dataclass(frozen=True)
class WindowBound:
    """Both bounds of a window of batches, as means per batch, and the distinct rows the
    window's batches update (summed over its batches: a row updated by two batches
    counts twice, as it is written twice)."""
    batches: int
    rows: int
    cycles: float
    floor_cycles: float


def window_bounds(config, batches, *, staleness=0):
    """The :class:`WindowBound` of ``batches``."""
    bounds = [batch_bound(config, b, staleness=staleness) for b in batches]
    n = max(1, len(bounds))
    return WindowBound(batches=len(bounds), rows=sum(b.rows for b in bounds),
                       cycles=sum(b.cycles for b in bounds) / n,
                       floor_cycles=sum(b.floor_cycles for b in bounds) / n)


def window_bound(config, batches, *, staleness=0):
    """Mean bound cycles per batch over ``batches`` (the scheme's)."""
    return window_bounds(config, batches, staleness=staleness).cycles

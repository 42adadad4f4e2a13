"""The PMEM bound of a batch: the fewest media cycles any system needs for it.

Whatever does the embedding work, a batch must read each distinct row it
touches once, write it back once, write an undo record of its old value
first (the row's lines and a share of a group line, :data:`GROUP_RECORDS`
records a group), a commit record, and its share of the MLP snapshots: one
every ``K + 1`` batches at least, with the staleness bound K. The PMEM
model reads and writes at independent rates (``Config.pmem.read_rate`` and
``write_rate``), so no system can finish a batch in fewer cycles than the
slower of the two streams takes. A system's cycles per batch against this
bound is how close it comes to the media.
"""

from dataclasses import dataclass

from trainingcxl.spec.config import GROUP_RECORDS
from .regions import distinct_rows

__all__ = ["BatchBound", "batch_bound", "window_bound"]


@dataclass(frozen=True)
class BatchBound:
    """The media traffic a batch cannot avoid, and the cycles it takes at the media's rates."""
    rows: int
    lines_read: int
    lines_written: int
    read_cycles: float
    write_cycles: float

    @property
    def cycles(self):
        return max(self.read_cycles, self.write_cycles)


def batch_bound(config, batch, *, staleness=0):
    """The :class:`BatchBound` of ``batch`` on ``config``'s media, with snapshots at
    least every ``staleness + 1`` batches."""
    rows = distinct_rows(config, batch)
    lpr = config.lines_per_row
    undo = rows * lpr + -(-rows // GROUP_RECORDS)
    written = rows * lpr + undo + 1 + (config.mlp_lines + 1) / (staleness + 1)
    read = rows * lpr
    (r_lines, r_cycles), (w_lines, w_cycles) = config.pmem.read_rate, config.pmem.write_rate
    return BatchBound(rows=rows, lines_read=read, lines_written=written,
                      read_cycles=read * r_cycles / r_lines, write_cycles=written * w_cycles / w_lines)


def window_bound(config, batches, *, staleness=0):
    """Mean bound cycles per batch over ``batches``."""
    bounds = [batch_bound(config, b, staleness=staleness) for b in batches]
    return sum(b.cycles for b in bounds) / max(1, len(bounds))

"""Whether a configuration's checkpoint regions can serve a run: the undo log must hold
the records of the batches live at once, and a snapshot slot the MLPs."""

import numpy as np

from trainingcxl.spec.config import GROUP_RECORDS
from .golden import batch_keys

__all__ = ["distinct_rows", "check_checkpoint_regions"]


def distinct_rows(config, batch):
    """Distinct ``(table, row)`` pairs of a CSR batch: the undo records its lookup writes."""
    keys, _ = batch_keys(config, batch.indices, batch.offsets)
    return len(np.unique(keys))


def check_checkpoint_regions(config, batch_size, batches=None, *, relaxed=True):
    """Refuse a run the checkpoint regions cannot serve: an undo log that cannot hold
    the records of the batches live at once (the device would refuse their lookups
    with ``LOG_TOO_SMALL``), or snapshot slots smaller than the MLPs (every
    ``SNAPSHOT_MLP`` would fail with ``BAD_SIZE``).

    A batch's records are its distinct rows, and they take
    :meth:`Config.groups_for` slots of the ring. At a lookup every committed
    batch is durable, so the running batch and, in relaxed order, the next one
    looked up early are live. With ``batches`` (the run's, in order) their
    distinct rows are counted; without, every index is taken as a distinct row
    (the worst case)."""
    if batches is None:
        groups = config.groups_for(config.records_per_batch(batch_size))
        need = (2 if relaxed else 1) * groups
        what = f"batches of {batch_size} need {need} ({'two batches' if relaxed else 'a batch'} " \
               f"of distinct rows at worst)"
    else:
        counts = [config.groups_for(distinct_rows(config, b)) for b in batches]
        pairs = [a + b for a, b in zip(counts, counts[1:])] if relaxed and len(counts) > 1 else counts
        need = max(pairs, default=0)
        what = (f"these batches need {need} (for the distinct rows of "
                f"{'two consecutive batches' if relaxed else 'a batch'})")
    if config.log_groups < need:
        raise ValueError(f"the undo log holds {config.log_groups} groups of up to "
                         f"{GROUP_RECORDS} records; {what}: raise log_lines to "
                         f"{need * config.group_lines} or leave it 0 with model.batch_size = "
                         f"{batch_size}")
    if config.snapshot_size < config.mlp_lines + 1:
        raise ValueError(f"a snapshot slot holds {config.snapshot_size - 1} lines of parameters; "
                         f"the MLPs ({config.mlp_params:,} float32) need {config.mlp_lines}: raise "
                         f"snapshot_lines to {config.mlp_lines + 1} or leave it 0")

"""CPR's partial recovery of a pool: periodic checkpoints of each device's tables, and on a
device's failure only that device's tables go back to them.

CPR (Maeng et al., MLSys 2021) trains a recommendation model whose embedding tables
are spread over nodes and checkpoints them periodically. When a node fails, full
recovery rolls every node back to the last checkpoint and redoes the batches since;
partial recovery reloads only the failed node's tables from the checkpoint and lets
the others, and the MLPs, go on: no batch is redone, but the updates the failed
tables received since the checkpoint are lost, which costs accuracy. CPR bounds that
cost with the *portion of lost samples* (PLS: the samples whose updates a failure
lost, over all samples trained) and chooses the checkpoint interval from a target
PLS and the failure rate: a failure loses half an interval on average, so an
interval of ``2 * PLS * T_fail`` batches keeps the PLS at its target
(:func:`cpr_interval`). Two variants save the rows that matter most more often,
within the same write budget: each ``fraction`` of an interval they save the
``fraction`` of a device's rows with the highest priority, CPR-MFU the rows used
most since they were last saved, CPR-SSU the rows that a sample of ``fraction`` of
the training samples touched since they were last saved (:class:`PartialCheckpoints`).
"""

import numpy as np

from .golden import touched_rows

__all__ = ["CPR_VARIANTS", "CPR_PLS", "CPR_FRACTION", "cpr_interval", "check_cpr_settings", "failure_schedule", "PartialCheckpoints"]

#: The variants, by how a checkpoint chooses its rows.
CPR_VARIANTS = ("cpr", "cpr-mfu", "cpr-ssu")
#: The defaults: the portion of lost samples CPR's interval aims at, and the share of
#: the rows CPR-MFU and CPR-SSU save at a time.
CPR_PLS, CPR_FRACTION = 0.1, 0.125


def cpr_interval(pls, failure_every):
    """CPR's checkpoint interval in batches for a target portion of lost samples ``pls``
    and a failure every ``failure_every`` batches on average (at least 1)."""
    return max(1, round(2 * pls * failure_every))


def check_cpr_settings(pls, fraction):
    """A :exc:`ValueError` unless ``pls`` is in (0, 0.5] and ``fraction`` in (0, 1]."""
    if not 0 < pls <= 0.5 or not 0 < fraction <= 1:
        raise ValueError(f"CPR's portion of lost samples (--pls) is in (0, 0.5] and the share "
                         f"of rows a variant saves (--fraction) in (0, 1], not {pls} and "
                         f"{fraction}")


def failure_schedule(devices, batches, failure_every, seed):
    """Failures of one device of a pool, ``failure_every`` batches apart on average
    (geometric gaps; 0: none) over ``batches`` batches: ``[(d, device), ...]``, each
    striking after batch ``d`` (``d < batches``). The same ``seed`` gives the same
    schedule to the golden model's study and to the devices' runs."""
    if not failure_every:
        return []
    rng = np.random.default_rng([seed, 0xFA11])
    out, d = [], int(rng.geometric(1 / failure_every))
    while d < batches:
        out.append((d, int(rng.integers(devices))))
        d += int(rng.geometric(1 / failure_every))
    return out


class PartialCheckpoints:
    """The checkpoints of one training run's tables under a CPR ``variant``.

    ``tables``: the live tables (numpy arrays, changed in place by training). The
    checkpoint starts as their values at batch 0. :meth:`after_batch` takes batch
    ``b``'s rows into the priorities and saves on the variant's schedule;
    :meth:`restore` puts the checkpoint's values back into some tables (a device's,
    after its failure). ``rows_saved`` counts the rows written to checkpoints, for the
    overhead."""

    def __init__(self, config, tables, variant, interval, *, fraction=CPR_FRACTION, seed=0):
        if variant not in CPR_VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(CPR_VARIANTS)}, not {variant!r}")
        self.config, self.tables, self.variant = config, tables, variant
        self.saved = [t.copy() for t in tables]
        self.rows_saved = 0
        self.fraction = fraction
        # Plain CPR saves everything every interval; the variants a fraction of the rows
        # every fraction of it: the same rows written per batch.
        self.every = interval if variant == "cpr" else max(1, round(interval * fraction))
        self.priority = [np.zeros(len(t), dtype=np.int64) for t in tables]
        self.rng = np.random.default_rng([seed, 0xC9])

    def after_batch(self, b, batch):
        """Batch ``b`` (a :class:`~trainingcxl.host.model.data.Batch`) has been trained;
        returns the rows a checkpoint saved now (an array per table), or ``None``."""
        if self.variant == "cpr-mfu":
            per_table = self._rows_used(batch.indices, batch.offsets, batch.batch_size)
            for pri, rows in zip(self.priority, per_table):
                np.add.at(pri, rows, 1)
        elif self.variant == "cpr-ssu":
            picked = np.flatnonzero(self.rng.random(batch.batch_size) < self.fraction)
            n_tables = self.config.n_tables
            bags = (picked[:, None] * n_tables + np.arange(n_tables)[None, :]).ravel()
            offsets = np.asarray(batch.offsets, dtype=np.int64)
            idx = np.concatenate([batch.indices[offsets[k]:offsets[k + 1]] for k in bags]
                                 or [np.zeros(0, dtype=np.int64)])
            sub = np.concatenate([[0], np.cumsum(np.diff(offsets)[bags])])
            for pri, rows in zip(self.priority, touched_rows(self.config, idx, sub)):
                pri[rows] = 1
        return self._save() if b % self.every == 0 else None

    def _rows_used(self, indices, offsets, batch_size):
        """Per table, every row index the batch names (with repeats)."""
        offsets = np.asarray(offsets, dtype=np.int64)
        table_of = np.repeat(np.arange(len(offsets) - 1) % self.config.n_tables, np.diff(offsets))
        indices = np.asarray(indices, dtype=np.int64)
        return [indices[table_of == t] for t in range(self.config.n_tables)]

    def _save(self):
        saved_rows = []
        for t, (live, saved, pri) in enumerate(zip(self.tables, self.saved, self.priority)):
            if self.variant == "cpr":
                rows = np.arange(len(live))
            else:
                budget = -(-len(live) * self.fraction // 1)
                ranked = np.argsort(-pri, kind="stable")[:int(budget)]
                rows = ranked[pri[ranked] > 0]
                pri[rows] = 0
            saved[rows] = live[rows]
            self.rows_saved += len(rows)
            saved_rows.append(rows)
        return saved_rows

    def restore(self, tables):
        """Put the checkpoint's values back into the tables numbered ``tables``."""
        for t in tables:
            self.tables[t][...] = self.saved[t]

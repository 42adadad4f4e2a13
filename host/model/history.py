"""The golden models' recent states, kept as undo records: what a recovery must find.

After a power failure the host compares the device's tables with the golden
tables after the durable batch D and resumes training from there
(:mod:`trainingcxl.host.protocol.resume`). A copy of every table per batch
would cost the tables' size per batch; like the device's undo log, this keeps
per batch only the rows the batch changed, with their old values, and rolls
the live tables back, newest batch first, to reach an earlier state. The MLPs
are small beside the tables and are kept whole, batch by batch.
"""

import numpy as np

from trainingcxl.host.model.golden import touched_rows

__all__ = ["GoldenHistory"]


class GoldenHistory:
    """The fixed-point golden trainer and the float32 reference, stepped together, and what
    brings both back to their state after any batch since the last :meth:`prune`.

    Per batch ``b``: an undo record (for every table, the rows ``b`` changes and their
    values before ``b``, in fixed point and in float32), taken by :meth:`step` before the
    trainers update in place, and both MLPs' parameters after ``b``, taken by
    :meth:`remember`. ``head`` is the batch the live trainers are at; the state after
    ``b`` is :meth:`reachable` once ``b`` is remembered and while no later record is pruned.
    """

    def __init__(self, golden, reference):
        self.golden, self.reference = golden, reference
        self.head = 0
        self._undo = {}     # b -> per table (rows, golden values, reference values) before b
        self._mlp = {}      # b -> (golden parameters, reference parameters) after b
        self.remember(0)

    def step(self, b, batch, inputs=(None, None), model_inputs=(None, None)):
        """Train both models on ``batch`` as batch ``b`` (the one after ``head``); returns
        their :class:`~trainingcxl.host.model.dlrm.StepResult`s. On a pool device,
        ``inputs`` are each model's own (``inputs(batch)``) and ``model_inputs`` the
        pooled vectors of every table, gathered from the pool."""
        if b != self.head + 1:
            raise ValueError(f"batch {b} does not follow batch {self.head}")
        rows = touched_rows(self.golden.config, batch.indices, batch.offsets)
        undo = [(r, g[r], f[r]) for r, g, f in zip(rows, self.golden.tables, self.reference.tables)]
        want = self.golden.step(batch, inputs[0], model_inputs[0])
        ref = self.reference.step(batch, inputs[1], model_inputs[1])
        self._undo[b], self.head = undo, b
        return want, ref

    def remember(self, b):
        """Keep the MLPs after batch ``b``, the batch the trainers are at."""
        if b != self.head:
            raise ValueError(f"the trainers are at batch {self.head}, not {b}")
        self._mlp[b] = (self.golden.dense.parameters(), self.reference.dense.parameters())

    def prune(self, floor):
        """Forget what only the states before batch ``floor`` need."""
        for b in [b for b in self._mlp if b < floor]:
            del self._mlp[b]
        for b in [b for b in self._undo if b <= floor]:
            del self._undo[b]

    def reachable(self, d):
        return d in self._mlp and all(b in self._undo for b in range(d + 1, self.head + 1))

    def mlp(self, b):
        """``(golden, reference)`` MLP parameters after batch ``b``, or ``None``."""
        return self._mlp.get(b)

    def tables_equal(self, d, tables):
        """Whether ``tables`` equal the golden tables after batch ``d``, bit for bit; the live
        tables stay as they are."""
        if not self.reachable(d) or len(tables) != len(self.golden.tables):
            return False
        for live, got, (rows, old) in zip(self.golden.tables, tables, self._changes_since(d)):
            got = np.asarray(got)
            if got.shape != live.shape:
                return False
            same = (got == live).all(axis=1)
            same[rows] = (got[rows] == old).all(axis=1)
            if not same.all():
                return False
        return True

    def _changes_since(self, d):
        """Per table, the golden rows changed after batch ``d`` and their values after ``d``:
        a row's oldest record after ``d`` holds them (what a rollback newest first leaves)."""
        records = [self._undo[b] for b in range(d + 1, self.head + 1)]      # oldest first
        out = []
        for t, live in enumerate(self.golden.tables):
            if not records:
                out.append((np.zeros(0, dtype=np.int64), live[:0]))
                continue
            rows = np.concatenate([rec[t][0] for rec in records])
            _, first = np.unique(rows, return_index=True)
            out.append((rows[first], np.concatenate([rec[t][1] for rec in records])[first]))
        return out

    def resume(self, d, m):
        """Where a recovery that found ``d`` and ``m`` leaves the trainers: their tables as
        after batch ``d`` (:meth:`rollback`), their MLPs as after batch ``m``; that is the
        state after ``d`` from now on."""
        golden_mlp, reference_mlp = self.mlp(m)
        self.rollback(d)
        self.golden.dense.load_parameters(golden_mlp)
        self.reference.dense.load_parameters(reference_mlp)
        # From here on the state after batch d is this one (the tables of d, the MLPs of
        # m): what a snapshot of d taken now holds (a pool device that had none as old).
        self._mlp[d] = (golden_mlp, reference_mlp)

    def rollback(self, d):
        """Bring both trainers back to their state after batch ``d`` and forget every later
        batch: the tables newest batch first, as the device's undo log does (a row changed
        by several batches ends at its oldest value), the MLPs from :meth:`remember`."""
        if not self.reachable(d):
            raise KeyError(f"the state after batch {d} is no longer kept (at {self.head})")
        for b in range(self.head, d, -1):
            for (rows, g, f), gt, ft in zip(self._undo.pop(b), self.golden.tables,
                                            self.reference.tables):
                gt[rows], ft[rows] = g, f
            self._mlp.pop(b, None)
        self.head = d
        for model, params in zip((self.golden, self.reference), self._mlp[d]):
            model.dense.load_parameters(params)

    def restart_at(self, b):
        """Take the trainers' present state as the state after batch ``b`` and keep only it:
        a partial recovery (CPR) resumes with older tables and a newer MLP, which no
        batch's state ever was."""
        self._undo.clear()
        self._mlp.clear()
        self.head = b
        self.remember(b)

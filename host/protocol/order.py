"""The order of a batch's lookups: strict, or relaxed (docs/relaxed-lookup.md).

A strategy (:mod:`.strategies`) gives the training loop (:mod:`.training`) one of
these. The loop asks it what runs while the GPU computes batch ``b`` and what
follows the update of ``b``:

* :class:`StrictOrder`: nothing beside the GPU; the next batch is looked up after
  the update;
* :class:`RelaxedOrder`: the lookup of ``b + 1`` runs while the GPU computes ``b``,
  leaving out the rows ``b`` touches, and ``FINISH(b + 1)`` adds them after the
  update; when the device's deferred list overflows (``DEFER_OVERFLOW``) the
  early lookup is dropped and ``b + 1`` is looked up again in strict order.
"""

from trainingcxl.spec.descriptors import ErrorCode

__all__ = ["StrictOrder", "RelaxedOrder"]


class StrictOrder:
    """Every batch is looked up after the update before it."""

    relaxed = False

    async def during_gpu(self, run, b, nxt):
        """Let the GPU step of ``b`` pass; returns the next batch's lookup if it ran early
        (``nxt``: the next batch's data, ``None`` after the last)."""
        await run.gpu_step()
        return None

    async def after_update(self, run, b, early, nxt):
        """Complete an early lookup of ``b + 1`` now that ``b`` is updated; returns it, or
        ``None`` if ``b + 1`` is to be looked up in turn."""
        return None


class RelaxedOrder(StrictOrder):
    """The next batch's lookup overlaps this batch's GPU step."""

    relaxed = True

    async def during_gpu(self, run, b, nxt):
        if nxt is None:
            return await super().during_gpu(run, b, nxt)
        task = run.runtime.spawn(run.strategy.lookup(run, b + 1, nxt, relaxed=True))
        await run.gpu_step()
        return await task

    async def after_update(self, run, b, early, nxt):
        if early is None:
            return None
        if early.error == ErrorCode.DEFER_OVERFLOW:
            run.record.fallbacks += 1        # too many shared rows: strict order
            return None
        await run.strategy.finish(run, b + 1, early, nxt.n_bags)
        return early

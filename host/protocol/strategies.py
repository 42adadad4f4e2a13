"""How each system of the ladder pools, updates, logs and checkpoints a batch.

A strategy is what :class:`~trainingcxl.host.protocol.training.TrainingRun`
asks for every step of a batch; the loop itself never asks which system it
runs. A strategy is made of parts, each an object chosen once from the
system's description (:func:`strategy`):

* how data reaches the engines: :class:`CxlCache` (the engines reach GPU memory
  themselves) or :class:`ExplicitCopies` (modelled DMA copies through host
  memory, ``near-data``);
* how rows are logged: :class:`LookupLogs` (the lookup's own reads),
  :class:`LoggingPass` (a logged pass of its own after the GPU step) or
  :class:`Unlogged`;
* how batches are checkpointed and recovered (:mod:`.checkpoints`);
* the order of lookups (:mod:`.order`).

Three kinds of strategy cover every system (:mod:`.systems`):

* :class:`Engines`: the device's engines pool and update (``near-data``,
  ``cxl-d``, ``cxl-b``, ``cxl``);
* :class:`Software`: the host pools and updates over CXL.mem (``pmem``,
  :mod:`.software_path`) or on its own memory bus (``host-pmem``,
  :mod:`.host_pmem`) and checkpoints in software;
* :class:`LookupOnly`: a device with the lookup engine alone (the small
  board): it pools, the host applies each batch's update over CXL.mem, and
  nothing is checkpointed.
"""

import numpy as np

from trainingcxl.spec.descriptors import ErrorCode
from trainingcxl.host.driver.device import LookupResult, lines_to_rows, rows_to_lines
from trainingcxl.host.model.fixed import wrap32
from trainingcxl.host.model.golden import (batch_keys, coalesce_update, coalesced_deltas,
                                           coalesced_layout, key_deltas, pool_rows)
from trainingcxl.host.model.gpu import embedding_cycles
from .checkpoints import (OverlappedSoftwareCheckpoints, SoftwareCheckpoints, Unchecked,
                          device_checkpoints)
from .host_pmem import HostPmemEmbeddings
from .order import RelaxedOrder, StrictOrder
from .software_path import SoftwareEmbeddings

__all__ = ["Engines", "Software", "LookupOnly", "strategy", "CxlCache", "ExplicitCopies",
           "LookupLogs", "LoggingPass", "Unlogged"]


def _chunks(cfg, indices, offsets):
    """The descriptors of a coalesced batch (:func:`~trainingcxl.host.model.golden.coalesced_layout`):
    ``(start, stop, indices, offsets)`` of each, its bags ``start:stop`` being whole
    rounds of the tables (a coalesced bag's table is its number modulo ``n_tables``),
    at most ``max_bags``."""
    step = cfg.max_bags // cfg.n_tables * cfg.n_tables
    n_bags = len(offsets) - 1
    for start in range(0, n_bags, step):
        stop = min(n_bags, start + step)
        lo, hi = int(offsets[start]), int(offsets[stop])
        yield start, stop, indices[lo:hi], offsets[start:stop + 1] - offsets[start]


class RowsLookup(LookupResult):
    """A lookup that gathers each distinct row of a batch once, for the GPU to pool.

    ``keys`` are the batch's distinct ``(table, row)`` keys (:func:`batch_keys`),
    ``slots`` each index's key, ``rows`` the rows gathered so far and ``pending``
    the keys not yet gathered (in relaxed order, the rows the previous batch
    updates, gathered after its update)."""

    def __init__(self, batch, keys, slots, dim):
        super().__init__(None, ErrorCode.NONE, 0)
        self.batch, self.keys, self.slots = batch, keys, slots
        self.rows = np.zeros((len(keys), dim), np.int32)
        self.pending = np.ones(len(keys), bool)


#: How much more the PMEM reads a row gather saves must weigh than what it adds: the
#: estimate leaves out the descriptors' and completions' latency and, on a non-coherent
#: link, the copies' setup.
ROWS_MARGIN = 2


def gathers_rows(cfg, batch, distinct):
    """Whether a batch's lookup should gather each of its ``distinct`` rows once and let
    the GPU pool, rather than have the device pool every index: the PMEM reads it saves
    against the lines it sends to the GPU beyond the pooled bags' and the GPU's pooling
    kernel, with a margin (:data:`ROWS_MARGIN`)."""
    (r_lines, r_cycles), lpr = cfg.pmem.read_rate, cfg.lines_per_row
    indices = len(batch.indices)
    saved = (indices - distinct) * lpr * r_cycles / r_lines
    cost = (max(0, distinct - batch.n_bags) * lpr
            + embedding_cycles(cfg, gathered=indices, rows=distinct, bags=batch.n_bags,
                               update=False))
    return saved > ROWS_MARGIN * cost


def update_chunks(cfg, keys, sums):
    """A batch's update as coalesced ``UPDATE`` descriptors: ``(indices, offsets,
    deltas)`` of each, from its distinct ``keys`` and their summed deltas
    (:func:`~trainingcxl.host.model.golden.key_deltas`).

    The GPU sums each row's contributions (sparse-gradient deduplication), so the
    device reads and writes every distinct row once. A batch with more distinct
    rows than a descriptor's ``max_bags`` goes out in chunks of whole rounds of
    the tables (a coalesced bag's table is its number modulo ``n_tables``), so the
    update's cost follows the distinct rows whatever the batch size."""
    indices, offsets, rows_deltas = coalesced_deltas(cfg, keys, sums)
    for start, stop, idx, off in _chunks(cfg, indices, offsets):
        yield idx, off, rows_deltas[start:stop]


# -- how data reaches the engines ------------------------------------------------------------

class CxlCache:
    """The engines read and write GPU memory over CXL.cache: nothing to copy."""

    async def configure(self, run):
        """Nothing to set up."""

    async def copy(self, run, nbytes, hops=1):
        """No copy: the engines reach the data where it is."""


class ExplicitCopies:
    """A non-coherent link: the engines' inputs and outputs are copied by DMA through host
    memory, and the host waits for each copy."""

    async def configure(self, run):
        # The copies put the engines' inputs and outputs in the device's own buffer: no
        # CXL link between the engines and that memory.
        await run.device.local_host_memory()

    async def copy(self, run, nbytes, hops=1):
        await run.copy(nbytes, hops=hops)


# -- how rows are logged -----------------------------------------------------------------

class LookupLogs:
    """Batch-aware logging: the lookup's own row reads are logged."""

    nolog = False

    async def before_update(self, run, b, batch):
        """Nothing more to log; returns the error that stops the update."""
        return ErrorCode.NONE


class Unlogged(LookupLogs):
    """The lookup logs nothing, and nothing else does (no checkpoints)."""

    nolog = True


class LoggingPass(LookupLogs):
    """Logging on the critical path: the lookup does not log; after the GPU step the
    batch's distinct rows are read again, each once, this time logged (coalesced
    ``LOOKUP``s, their pooled output unused), and the ``UPDATE`` then waits until every
    record is persistent."""

    nolog = True

    async def before_update(self, run, b, batch):
        run.enter("log", b)
        keys, _ = batch_keys(run.cfg, batch.indices, batch.offsets)
        indices, offsets, _ = coalesced_layout(run.cfg, np.unique(keys))
        for _, _, idx, off in _chunks(run.cfg, indices, offsets):
            error = (await run.device.lookup(b, idx, off)).error
            if error != ErrorCode.NONE:
                return error
        return ErrorCode.NONE


class Engines:
    """The device's engines do the embedding work; ``path`` is how data reaches them,
    ``logging`` how rows are logged, ``checkpoints`` how batches are checkpointed."""

    def __init__(self, *, path, logging, checkpoints):
        self.path, self.logging, self.checkpoints = path, logging, checkpoints
        # The GPU's copy of the rows it gathered for a batch, as that batch's update
        # leaves them: ``(batch, keys, rows)`` (relaxed order, rows gathered).
        self._carry = None
        # An UPDATE submitted and not waited for: ``(batch, sequence number)``, and
        # once waited for, ``(batch, error)``.
        self._pending = self._settled = None

    def stats(self):
        """What the host did beside the device, to add to the run's ``host`` figures."""
        return {}

    def order(self, relaxed, runtime):
        """The lookup order (:mod:`.order`): relaxed if asked and ``runtime`` can overlap."""
        if not relaxed:
            return StrictOrder()
        if not runtime.overlaps:
            raise ValueError("relaxed order overlaps the next lookup with this batch; this "
                             "runtime runs one thing at a time (a board trains in strict order)")
        return RelaxedOrder()

    async def configure(self, run):
        # At power-up the GPU's memory is empty: nothing carries over.
        self._carry = self._pending = self._settled = None
        await self.checkpoints.configure(run)
        await self.path.configure(run)

    async def lookup(self, run, b, batch, *, relaxed=False):
        """Batch ``b``'s lookup: the device pools every index, or it gathers each distinct
        row once and the GPU pools (:func:`gathers_rows`). In relaxed order (before
        ``b - 1`` is updated) the device defers the rows ``b - 1`` touches, or, gathering
        rows, the host leaves them for :meth:`finish`; a batch whose deferred indices
        would not fit the device's list gathers rows, so the overlap never falls back to
        strict order."""
        keys, _ = batch_keys(run.cfg, batch.indices, batch.offsets)
        distinct, slots = np.unique(keys, return_inverse=True)
        shared = None
        if relaxed:
            prev, _ = batch_keys(run.cfg, run.batch_data(b - 1).indices,
                                 run.batch_data(b - 1).offsets)
            shared = np.isin(distinct, prev)
        # The device would defer every index of a row the batch before touches: more than
        # its deferred list holds, and the lookup would be redone in strict order.
        overflows = shared is not None and int(shared[slots].sum()) > run.cfg.defer_depth
        if overflows or gathers_rows(run.cfg, batch, len(distinct)):
            looked = RowsLookup(batch, distinct, slots, run.cfg.dim)
            if relaxed:
                await self._gather(run, b, looked, ~shared)
                return looked
            await self._gather(run, b, looked, looked.pending)
            return await self._pool(run, looked)
        dev = run.device
        await self.path.copy(run, 4 * (len(batch.indices) + len(batch.offsets)))  # host -> device
        looked = await dev.lookup(b, batch.indices, batch.offsets, relaxed=relaxed,
                                  nolog=self.logging.nolog,
                                  after_submit=run.hook("lookup", b))
        await self.path.copy(run, batch.n_bags * run.cfg.dim * 4, hops=2)    # device -> host -> GPU
        return looked

    async def _gather(self, run, b, looked, which):
        """Gather the distinct rows ``which`` (a mask of ``looked.keys``) in coalesced
        lookups of whole table rounds, each row once."""
        cfg, dev = run.cfg, run.device
        indices, offsets, bags = coalesced_layout(cfg, looked.keys[which])
        at = np.flatnonzero(which)
        for k, (start, stop, idx, off) in enumerate(_chunks(cfg, indices, offsets)):
            await self.path.copy(run, 4 * (len(idx) + len(off)))                    # host -> device
            got = await dev.lookup(b, idx, off,
                                   nolog=self.logging.nolog,
                                   after_submit=run.hook("lookup", b) if k == 0 else None)
            await self.path.copy(run, len(idx) * cfg.dim * 4, hops=2)        # device -> host -> GPU
            mine = (bags >= start) & (bags < stop)
            looked.rows[at[mine]] = got.pooled[bags[mine] - start]
            looked.cycles += got.cycles
            if got.error != ErrorCode.NONE:
                looked.error = got.error
                break
        looked.pending[which] = False

    async def _pool(self, run, looked, now=True):
        """The GPU pools the gathered rows into the batch's bags, at once, or (``now``
        false) as the first kernel of the batch's GPU step, beside what the device does
        then."""
        batch = looked.batch
        cycles = embedding_cycles(run.cfg, gathered=len(batch.indices), rows=len(looked.keys),
                                  bags=batch.n_bags, update=False)
        run.host_stats["gpu_embedding_cycles"] = run.host_stats.get("gpu_embedding_cycles", 0) + cycles
        if now:
            await run.wait(cycles)
        else:
            run.gpu_owed += cycles
        looked.pooled = pool_rows(run.cfg, looked.rows, looked.slots, batch.offsets)
        return looked

    async def finish(self, run, b, looked, n_bags):
        """Add the rows a relaxed lookup of ``b`` deferred, now that ``b - 1`` is updated.

        Gathering rows, the GPU has the rows ``b - 1`` touched as its update left them
        (it gathered them and computed their deltas): it pools and begins ``b``'s step
        at once, while the device reads those rows for ``b``'s undo log (as ``b - 1``
        left them) and the host checks them against the GPU's copy."""
        if isinstance(looked, RowsLookup):
            which = looked.pending.copy()
            if self._carry is not None and self._carry[0] == b - 1:
                _, keys, rows = self._carry
                looked.rows[which] = rows[np.searchsorted(keys, looked.keys[which])]
                looked.pending[which] = False
                await self._pool(run, looked, now=False)
                run.gpu_begins()
                # The update of ``b - 1`` runs on beside the GPU's step; the rows it
                # leaves are read once it is done.
                await self.settle_update(run)
                if not self.logging.nolog:      # a logging pass or no log: nothing to read
                    carried = looked.rows[which]
                    await self._gather(run, b, looked, which)
                    if looked.error == ErrorCode.NONE and not np.array_equal(
                            looked.rows[which], carried):
                        run.record.pooled_mismatches += 1    # the GPU's copy is not the media's
                return
            await self.settle_update(run)
            await self._gather(run, b, looked, which)
            await self._pool(run, looked)
            return
        await self.settle_update(run)
        fin, _ = await run.device.finish(b, n_bags)
        looked.pooled = await run.device.pooled(b, n_bags)
        if fin != ErrorCode.NONE:
            looked.error = fin

    async def update(self, run, b, batch, deltas, looked):
        """Log (if the system logs in a pass of its own) and apply batch ``b``'s deltas;
        returns the error code."""
        logged = await self.logging.before_update(run, b, batch)
        if logged != ErrorCode.NONE:
            return logged
        run.enter("update", b)
        error = ErrorCode.NONE
        keys, sums = key_deltas(run.cfg, batch.indices, batch.offsets, deltas)
        self._carry = None
        # In relaxed order the GPU has the rows as this update leaves them (it gathered
        # them and computed the deltas): the next batch's step need not wait for the
        # device, so the last descriptor of the update is left running beside it
        # (:meth:`settle_update` collects it before the next descriptor).
        carry = run.relaxed and isinstance(looked, RowsLookup)
        chunks = list(update_chunks(run.cfg, keys, sums))
        for k, (indices, offsets, rows_deltas) in enumerate(chunks):
            # GPU -> host -> device
            await self.path.copy(run, (len(offsets) - 1) * run.cfg.dim * 4, hops=2)
            hook = run.hook("update", b) if k == 0 else None
            if carry and k == len(chunks) - 1:
                seq = await run.device.update(b, indices, offsets, rows_deltas, coalesced=True,
                                              after_submit=hook, wait=False)
                self._pending = (b, seq)
                break
            error, _ = await run.device.update(b, indices, offsets, rows_deltas, coalesced=True,
                                               after_submit=hook)
            if error != ErrorCode.NONE:
                return error
        if carry:
            self._carry = (b, keys, wrap32(looked.rows.astype(np.int64) - sums))
        return error

    async def settle_update(self, run):
        """Wait for an ``UPDATE`` left running (:meth:`update`), if one is; its outcome is
        kept for :meth:`update_error`."""
        if self._pending is None:
            return
        batch, seq = self._pending
        self._pending = None
        error = await run.device.settle(seq, batch)
        if error != ErrorCode.NONE:
            self._carry = None          # the rows are not as the GPU has them
        self._settled = (batch, error)

    async def update_error(self, run, b, error):
        """The outcome of batch ``b``'s update, ``error`` as :meth:`update` returned it
        unless its last descriptor was left running (then waited for now if need be)."""
        await self.settle_update(run)
        settled, self._settled = self._settled, None
        return settled[1] if settled is not None and settled[0] == b else error


class Software(Engines):
    """``pmem``: the host reads every row over CXL.mem, the GPU pools and updates, the host
    writes the rows back, and checkpoints are software's (:mod:`.software_path`);
    ``host-pmem``: the CPU does it all on its own memory bus (:mod:`.host_pmem`).
    ``soft`` is the host's embeddings; the host has nothing to overlap, so its lookups
    run in strict order. With ``early_log`` (``host-pmem-k``, its checkpoints an
    :class:`~.checkpoints.OverlappedSoftwareCheckpoints`) the CPU persists the batch's
    undo records and what it can of a pending MLP snapshot while the GPU computes
    (:class:`WorkDuringGpu`); after the GPU step only the rows and the commit remain."""

    def __init__(self, soft, *, checkpoints, early_log=False):
        super().__init__(path=CxlCache(), logging=Unlogged(), checkpoints=checkpoints)
        self.soft = soft
        self.early_log = early_log and soft.checkpointing
        self._old = None                # (batch, its rows as read): logged during its GPU step

    def stats(self):
        return dict(self.soft.stats)

    def order(self, relaxed, runtime):
        return WorkDuringGpu() if self.early_log else StrictOrder()

    async def configure(self, run):
        await self.checkpoints.configure(run)

    async def lookup(self, run, b, batch, *, relaxed=False):
        pooled, old = await self.soft.lookup(batch)
        looked = LookupResult(pooled, ErrorCode.NONE, 0)
        looked.old = old
        self._old = (b, old)
        return looked

    async def during_gpu(self, run, b):
        """While batch ``b``'s GPU step runs: its undo records (the rows as its lookup read
        them), then as much of a pending snapshot as the step leaves time for."""
        logged, old = self._old
        assert logged == b, (logged, b)
        await self.checkpoints.room(run, b, len(old))
        await self.soft.log(b, old)
        await self.checkpoints.during_gpu(run)

    async def update(self, run, b, batch, deltas, looked):
        run.enter("update", b)
        await self.soft.update(b, batch, deltas, looked.old, logged=self.early_log)
        return ErrorCode.NONE


class WorkDuringGpu(StrictOrder):
    """Strict order, and the host works while the GPU computes: the GPU step begins when
    the lookup is done, the strategy's :meth:`Software.during_gpu` runs beside it, and
    the host waits for whatever of the step is left."""

    async def during_gpu(self, run, b, nxt):
        run.gpu_begins()
        await run.strategy.during_gpu(run, b)
        return await super().during_gpu(run, b, nxt)


class LookupOnly(Engines):
    """A device with the lookup engine alone: it pools, and the host applies each batch's
    coalesced update itself, reading and writing the rows over CXL.mem. Nothing is
    checkpointed, so such a device cannot survive a power failure."""

    async def update(self, run, b, batch, deltas, looked):
        run.enter("update", b)
        cfg, dev = run.cfg, run.device
        # Each row once, with its summed delta (the host has no bag limit).
        indices, offsets, rows_deltas = coalesce_update(cfg, batch.indices, batch.offsets, deltas)
        for k in range(len(offsets) - 1):
            if offsets[k + 1] == offsets[k]:
                continue
            t, row = k % cfg.n_tables, int(indices[offsets[k]])
            first = cfg.table_base[t] + row * cfg.lines_per_row
            old = lines_to_rows(await dev.read_media(first, cfg.lines_per_row), cfg.dim)[0]
            new = wrap32(old.astype(np.int64) - np.asarray(rows_deltas[k], dtype=np.int64))
            await dev.write_media(dict(enumerate(rows_to_lines(new.astype(np.int32)), first)))
        return ErrorCode.NONE


def strategy(system, *, device, runtime, checkpointing, staleness):
    """The strategy that trains the way ``system`` (:class:`~.systems.System`) says, on
    ``device`` and ``runtime``, with checkpoints (staleness bound ``staleness``) or
    without."""
    if not system.engines:
        kind = HostPmemEmbeddings if system.host_bus else SoftwareEmbeddings
        soft = kind(device, checkpointing=checkpointing, wait=runtime.wait, now=runtime.now)
        if not checkpointing:
            checkpoints = Unchecked(configure=_nothing, recover=lambda run: soft.recover())
        elif system.early_log:
            checkpoints = OverlappedSoftwareCheckpoints(soft, staleness)
        else:
            checkpoints = SoftwareCheckpoints(soft)
        return Software(soft, checkpoints=checkpoints, early_log=system.early_log)
    path = CxlCache() if system.coherent else ExplicitCopies()
    if checkpointing:
        checkpoints = device_checkpoints(staleness, path)
        logging = LoggingPass() if system.log_pass else LookupLogs()
    else:
        checkpoints = Unchecked(configure=_engine_off, recover=lambda run: run.device.recover())
        logging = Unlogged() if system.log_pass else LookupLogs()
    kind = Engines if system.device_updates else LookupOnly
    return kind(path=path, logging=logging, checkpoints=checkpoints)


async def _nothing(run):
    """Software without checkpoints: the checkpoint regions stay the device's."""


async def _engine_off(run):
    """The device's checkpoint engine stays off (the GPU window and MLP registers are set
    all the same)."""
    await run.device.configure_checkpoints(run.k, enable=False)

"""The ``pmem`` system's host: embeddings and checkpoints in software, over CXL.mem.

Nothing near the memory computes. For each batch the host reads every row
the batch needs over CXL.mem, the GPU pools them (bit-exact with the device's
arithmetic, :mod:`trainingcxl.host.model.golden`), and after the GPU step the host
writes the updated rows back. Checkpointing is the software kind a
PMEM-based system does, in the device's own on-media formats
(:mod:`trainingcxl.spec.records`), so that the same invariants can be checked:

1. an undo record per row (its old lines), in undo groups of up to six rows
   (a slot of the log ring each), then a fence (every write acknowledged, i.e. persistent), then a ring
   header saying where the newest record is, fence;
2. the new rows, fence;
3. a commit record, fence;
4. stop-and-copy MLP snapshot: the older slot's header zeroed, fence, the
   parameters, fence, the header, fence.

Recovery is software too: the host reads the commit records, the snapshot and
ring headers, then as much of the ring as
:func:`trainingcxl.host.model.recovery.recover` walks (it reads ahead a chunk of
records at a time), writes back the rows it restores, fences, then the new
commit record.

Copies between host and GPU memory are charged with
:class:`~trainingcxl.spec.config.CopyTiming`; the GPU's pooling and updating
with :func:`~trainingcxl.host.model.gpu.embedding_cycles`; the CPU's
deduplication of the batch's rows with
:class:`~trainingcxl.spec.config.HostPmemTiming`.
"""

import numpy as np

from trainingcxl.spec.descriptors import ErrorCode
from trainingcxl.host.driver.device import Recovery
from trainingcxl.spec.config import GROUP_RECORDS, LINE_BYTES, RING_HEADERS
from trainingcxl.host.model.golden import embedding_bag_sum, embedding_update
from trainingcxl.host.model.gpu import embedding_cycles
from trainingcxl.host.model.recovery import recover
from trainingcxl.spec.records import (COMMIT, SNAPSHOT, commit_record, ring_header,
                                      snapshot_header, undo_group, valid_header)

__all__ = ["SoftwareEmbeddings"]


def _row_lines(row):
    raw = np.ascontiguousarray(row, dtype=np.int32).tobytes()
    return [int.from_bytes(raw[i:i + LINE_BYTES], "little") for i in range(0, len(raw), LINE_BYTES)]


def _param_lines(config, params):
    raw = np.asarray(params, dtype=np.float32).tobytes()
    raw += bytes(config.mlp_lines * LINE_BYTES - len(raw))
    return [int.from_bytes(raw[i:i + LINE_BYTES], "little") for i in range(0, len(raw), LINE_BYTES)]


#: Undo groups the software recovery reads at a time while it walks the ring.
_WALK_CHUNK = 32


class _Media(dict):
    """The media lines the host has read; reading another raises ``KeyError``."""


class SoftwareEmbeddings:
    """The host side of the ``pmem`` system on a :class:`~trainingcxl.host.driver.device.Device`.

    ``wait(cycles)`` is how the caller charges modelled time (GPU work and
    copies). Counts of what the host did go to :attr:`stats`.
    """

    def __init__(self, device, *, checkpointing, wait, now):
        self.dev, self.cfg = device, device.config
        self.checkpointing = checkpointing
        self.wait, self.now = wait, now
        self.gen = 0
        self.lsn = 0
        self.groups = 0                 # undo groups written in this generation
        self.ring_sel = 0               # the ring header line written next
        self.commit_slot = 0            # where the next commit record goes
        self.newest_slot = None         # the snapshot slot holding the newest snapshot
        self.staleness = 0              # the bound K the commit records carry
        self.first_group = {}           # batch -> its first undo group (the count before it)
        self.stats = {"host_line_ops": 0, "gpu_embedding_cycles": 0, "copy_cycles": 0,
                      "gpu_copy_bytes": 0, "host_cpu_cycles": 0}

    def _media_addr(self, table, row):
        return self.cfg.table_base[table] + row * self.cfg.lines_per_row

    async def configure(self):
        """The host owns the checkpoint regions: the device's engine stays off."""
        await self.dev.host_owns_checkpoints()

    async def _copy(self, nbytes):
        cycles = self.cfg.copy.cycles(nbytes)
        self.stats["copy_cycles"] += cycles
        self.stats["gpu_copy_bytes"] += nbytes
        await self.wait(cycles)

    async def _cpu(self, cycles):
        """The host's CPU works for ``cycles`` (and waits for it)."""
        self.stats["host_cpu_cycles"] += cycles
        await self.wait(cycles)

    async def _gpu(self, **work):
        cycles = embedding_cycles(self.cfg, **work)
        self.stats["gpu_embedding_cycles"] += cycles
        await self.wait(cycles)

    async def _fenced_write(self, lines):
        """Write ``{media line: data}`` and wait until every line is persistent (the CPU
        waits on its stores)."""
        t0 = self.now()
        await self.dev.write_media(lines)
        self.stats["host_cpu_cycles"] += self.now() - t0

    async def persist(self, lines):
        """Write ``{media line: data}`` as one fenced group (the CPU waits until it is
        persistent)."""
        await self._fenced_write(lines)

    async def _read(self, media_addrs):
        """``{media line: data}``; the CPU waits on its loads."""
        t0 = self.now()
        got = await self.dev.read_media_lines(media_addrs)
        self.stats["host_cpu_cycles"] += self.now() - t0
        return got

    # -- embeddings ------------------------------------------------------------------------

    def _rows_of(self, batch):
        """The distinct ``(table, row)`` pairs of a batch, in a fixed order."""
        cfg = self.cfg
        lengths = np.diff(batch.offsets)
        tables = np.repeat(np.arange(len(lengths)) % cfg.n_tables, lengths)
        return sorted(set(zip(tables.tolist(), np.asarray(batch.indices).tolist())))

    async def lookup(self, batch):
        """Read the batch's rows and pool them.

        Returns ``(pooled, old)``: ``old`` maps ``(table, row)`` to the row read."""
        cfg = self.cfg
        rows = self._rows_of(batch)
        # The CPU finds the distinct rows (a sort of the indices' keys) before it loads them.
        await self._cpu(cfg.host_pmem.cpu_cycles(dedup=len(batch.indices)))
        lpr = cfg.lines_per_row
        addrs = [self._media_addr(t, r) + k for t, r in rows for k in range(lpr)]
        got = await self._read(addrs)
        old, sparse = {}, [np.zeros((n, cfg.dim), dtype=np.int32) for n in cfg.tables]
        for t, r in rows:
            raw = b"".join(got[self._media_addr(t, r) + k].to_bytes(LINE_BYTES, "little")
                           for k in range(lpr))
            old[t, r] = sparse[t][r] = np.frombuffer(raw, dtype=np.int32)
        pooled = embedding_bag_sum(cfg, sparse, batch.indices, batch.offsets).pooled
        await self._pooled(batch, len(rows))
        return pooled, old

    async def _pooled(self, batch, rows):
        """Charge the pooling: the rows go to the GPU, which pools them."""
        cfg = self.cfg
        await self._copy(rows * cfg.dim * 4)                        # host -> GPU
        await self._gpu(gathered=len(batch.indices), rows=rows, bags=batch.n_bags, update=False)
        self.stats["host_line_ops"] += len(batch.indices) * cfg.lines_per_row

    async def _updated(self, batch, rows):
        """Charge the update: the GPU applies the deltas, the new rows come back to the host."""
        cfg = self.cfg
        await self._gpu(gathered=len(batch.indices), rows=rows, bags=batch.n_bags, update=True)
        await self._copy(rows * cfg.dim * 4)                        # GPU -> host
        self.stats["host_line_ops"] += rows * cfg.lines_per_row

    async def log(self, b, old):
        """Persist an undo record of each row of ``old`` (``(table, row)`` -> the row read),
        in groups, then the ring header that points past them."""
        cfg = self.cfg
        self.first_group[b] = self.groups
        if len(self.first_group) > 64:          # a recovery reaches back K + 1 batches at most
            del self.first_group[next(iter(self.first_group))]
        records = {}
        items = list(old.items())
        for k in range(0, len(items), GROUP_RECORDS):
            at = cfg.log_base + self.groups % cfg.log_groups * cfg.group_lines
            chunk = [(self._media_addr(t, r), _row_lines(row))
                     for (t, r), row in items[k:k + GROUP_RECORDS]]
            lines = undo_group(gen=self.gen, batch=b, lsn=self.lsn, records=chunk)
            records.update({at + j: line for j, line in enumerate(lines)})
            self.lsn += len(chunk)
            self.groups += 1
        await self._fenced_write(records)
        # Only once the records are persistent: recovery walks back from here.
        nxt = cfg.log_base + self.groups % cfg.log_groups * cfg.group_lines
        await self._fenced_write({cfg.ring_base + self.ring_sel: ring_header(
            gen=self.gen, batch=b, next_lsn=self.lsn, next_slot=nxt)})
        self.ring_sel = (self.ring_sel + 1) % RING_HEADERS

    async def update(self, b, batch, deltas, old, *, logged=False):
        """Apply ``deltas``, log the old rows (if checkpointing, unless ``logged`` already
        by :meth:`log`), write the new ones."""
        cfg = self.cfg
        sparse = [np.zeros((n, cfg.dim), dtype=np.int32) for n in cfg.tables]
        for (t, r), row in old.items():
            sparse[t][r] = row
        # In place: the zeroed tables hold only the batch's rows (their untouched pages are
        # never written, so never allocated), and a copy would cost the tables' size.
        new = embedding_update(cfg, sparse, batch.indices, batch.offsets, deltas, inplace=True)
        await self._updated(batch, len(old))
        if self.checkpointing and not logged:
            await self.log(b, old)
        rows = {}
        for t, r in old:
            for k, line in enumerate(_row_lines(new[t][r])):
                rows[self._media_addr(t, r) + k] = line
        await self._fenced_write(rows)

    # -- checkpoints -----------------------------------------------------------------------

    async def commit(self, b):
        cfg = self.cfg
        await self._fenced_write({cfg.commit_base + self.commit_slot:
                                  commit_record(gen=self.gen, batch=b, staleness=self.staleness)})
        self.commit_slot = (self.commit_slot + 1) % cfg.commit_lines

    async def snapshot(self, b, params):
        """Stop-and-copy: the MLP goes to the older slot before training goes on."""
        cfg = self.cfg
        slot = 0 if self.newest_slot is None else 1 - self.newest_slot
        base = cfg.snapshot_base[slot]
        await self._copy(cfg.mlp_params * 4)                        # GPU -> host
        data = _param_lines(cfg, params)
        await self._fenced_write({base: 0})
        await self._fenced_write({base + 1 + k: line for k, line in enumerate(data)})
        await self._fenced_write({base: snapshot_header(gen=self.gen, batch=b, data_lines=data)})
        self.newest_slot = slot

    async def stage_snapshot(self, b, params):
        """The MLP after batch ``b`` copied to host memory, to persist later: returns the
        slot and the fenced groups of lines that write it there, in order (its header
        zeroed, the parameters, the header). :attr:`newest_slot` is the caller's to set
        once the last group is persistent."""
        cfg = self.cfg
        slot = 0 if self.newest_slot is None else 1 - self.newest_slot
        base = cfg.snapshot_base[slot]
        await self._copy(cfg.mlp_params * 4)                        # GPU -> host
        data = _param_lines(cfg, params)
        return slot, [{base: 0}, {base + 1 + k: line for k, line in enumerate(data)},
                      {base: snapshot_header(gen=self.gen, batch=b, data_lines=data)}]

    async def recover(self):
        """Software recovery; returns ``(error, D, m, rolled_back, cycles)`` like the device's RECOVER."""
        cfg, dev = self.cfg, self.dev
        t0 = await dev.cycles()
        regions = [*range(cfg.commit_base, cfg.commit_base + cfg.commit_lines), *cfg.snapshot_base,
                   *range(cfg.ring_base, cfg.ring_base + RING_HEADERS)]
        media = _Media(await self._read(regions))
        while True:
            try:
                result = recover(cfg, _Media(media), staleness=0)
                break
            except KeyError as missing:
                # The walk went past what was read: read the next records back from there.
                size = cfg.group_lines
                at = cfg.log_base + (missing.args[0] - cfg.log_base) // size * size
                lines = []
                for _ in range(min(_WALK_CHUNK, cfg.log_groups)):
                    lines += range(at, at + size)
                    at = at - size if at != cfg.log_base else (
                        cfg.log_base + (cfg.log_groups - 1) * size)
                media.update(await self._read(lines))
        if not result.found:
            return Recovery(ErrorCode.NO_CHECKPOINT, None, None, 0, await dev.cycles() - t0,
                            len(result.reads))
        seal = next(a for a in result.writes if cfg.commit_base <= a < cfg.commit_base + cfg.commit_lines)
        rows = {a: v for a, v in result.writes.items() if a != seal}
        if rows:
            await self._fenced_write(rows)
        await self._fenced_write({seal: result.writes[seal]})
        self.gen, self.lsn, self.groups, self.ring_sel = result.gen, 0, 0, 0
        self.first_group = {}
        self.commit_slot = (seal - cfg.commit_base + 1) % cfg.commit_lines
        for slot, base in enumerate(cfg.snapshot_base):
            h = valid_header(media[base], SNAPSHOT)
            if h is not None and h.batch == result.m:
                self.newest_slot = slot
        assert valid_header(result.writes[seal], COMMIT) is not None
        return Recovery(ErrorCode.NONE, result.d, result.m, result.rolled_back,
                        await dev.cycles() - t0, len(result.reads))

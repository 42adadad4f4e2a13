"""The ``host-pmem`` system's host: PMEM on the CPU's memory bus, embeddings and
checkpoints in software.

The baseline the paper compares against: a PMEM-based recommendation system in
which the tables sit in persistent memory on the host's memory bus. For each
batch the CPU loads the rows the batch needs, pools them and sends the pooled
vectors to the GPU over PCIe; after the GPU step it receives the pooled
gradients, updates the rows and writes them back, as a software
persistent-memory transaction: undo records copied into the log, flushed and
fenced, then the rows, flushed and fenced, then a commit record (the same
on-media formats and protocol as :mod:`.software_path`, so the same recovery
and invariants apply).

The media are the simulated device's (a power failure strikes them like every
other system's), reached through the simulator's backdoor instead of CXL.mem:
nothing moves on the device's link or through its PMEM controller. Its loads
and stores reach them at the media's own latency and rates (``Config.pmem``,
the device's too), and its kernels (deduplication, pooling, the gradients'
summing and applying) cost CPU time
(:class:`~trainingcxl.spec.config.HostPmemTiming`); the copies are charged from
:class:`~trainingcxl.spec.config.CopyTiming`. A fenced group of stores reaches
the media line by line over its modelled time, so a power failure in the middle
leaves some of its lines persistent and the rest not, as ADR would.
"""

import numpy as np

from trainingcxl.spec.config import LINE_BYTES
from .software_path import SoftwareEmbeddings

__all__ = ["HostPmemEmbeddings"]

#: Parts a fenced group of stores reaches the media in (its lines in order).
_WRITE_STEPS = 8


class HostPmemEmbeddings(SoftwareEmbeddings):
    """:class:`~.software_path.SoftwareEmbeddings` with the CPU on the media's bus.

    ``media``: the media lines as a writable ``(lines, 64)`` byte array (the
    simulator's backdoor, ``Device.transport.media``)."""

    def __init__(self, device, *, checkpointing, wait, now):
        super().__init__(device, checkpointing=checkpointing, wait=wait, now=now)
        self.media = device.transport.media
        if self.media is None:
            raise ValueError("the host-pmem system reaches the media through the simulator's "
                             "backdoor, which this simulation lacks: use Verilator")
        self.timing = self.cfg.host_pmem
        self.stats.update(pmem_reads=0, pmem_writes=0, pmem_writes_data=0, pmem_writes_log=0,
                          pmem_writes_snapshot=0)
        self._loaded = 0            # cycles of the last group of loads, which pooling overlaps

    def _line(self, addr):
        return int.from_bytes(bytes(self.media[addr]), "little")

    async def _read(self, media_addrs):
        """The CPU's loads: bandwidth-bound after the first one's latency."""
        self._loaded = self.timing.read_cycles(self.cfg.pmem, len(media_addrs))
        await self._cpu(self._loaded)
        self.stats["pmem_reads"] += len(media_addrs)
        return {a: self._line(a) for a in media_addrs}

    def _region(self, addr):
        cfg = self.cfg
        if addr < cfg.log_base:
            return "pmem_writes_data"
        if any(base <= addr < base + cfg.snapshot_size for base in cfg.snapshot_base):
            return "pmem_writes_snapshot"
        return "pmem_writes_log"            # the log ring, its headers and the commit records

    async def _fenced_write(self, lines):
        """Stores, ``clwb`` of each line and a fence: the lines reach the media in order
        over the group's modelled time, the fence returns once the last is persistent."""
        items = list(lines.items())
        total = self.timing.write_cycles(self.cfg.pmem, len(items))
        step = -(-len(items) // _WRITE_STEPS) if items else 1
        spent = 0
        for k in range(0, len(items), step):
            part = items[k:k + step]
            due = total * (k + len(part)) // len(items)
            await self._cpu(due - spent)
            spent = due
            for addr, value in part:
                self.media[addr] = np.frombuffer(value.to_bytes(LINE_BYTES, "little"), np.uint8)
                self.stats[self._region(addr)] += 1
            self.stats["pmem_writes"] += len(part)

    async def _pooled(self, batch, rows):
        """The CPU pools the rows as its loads bring them (what the loads did not hide),
        and the pooled vectors go to the GPU."""
        pool = self.timing.cpu_cycles(pool=len(batch.indices) * self.cfg.dim)
        await self._cpu(max(0, pool - self._loaded))
        await self._copy(batch.n_bags * self.cfg.dim * 4)            # host -> GPU

    async def _updated(self, batch, rows):
        """The pooled gradients come from the GPU; the CPU sums each row's and applies
        them."""
        await self._copy(batch.n_bags * self.cfg.dim * 4)            # GPU -> host
        await self._cpu(self.timing.cpu_cycles(scatter=len(batch.indices) * self.cfg.dim,
                                               apply=rows * self.cfg.dim))

"""The reference of the device's RECOVER: what it must find and write, on a media image.

Mirrors :class:`trainingcxl.hdl.checkpoint.engine.CheckpointEngine` step by
step (docs/design.md, "Checkpoint protocol"), so a test can hand both the same PMEM contents,
including torn records, and compare the results bit for bit.
"""

from dataclasses import dataclass, field

import numpy as np

from trainingcxl.spec.config import GROUP_RECORDS, LINE_BYTES, RING_HEADERS
from trainingcxl.spec.records import (COMMIT, RING, SNAPSHOT, checksum, commit_record,
                                      decode_group_line, decode_record, valid_header)

__all__ = ["Recovery", "Checkpoint", "checkpoint_lines", "newest_checkpoint", "recover",
           "snapshot_params"]


@dataclass
class Recovery:
    """Result of a recovery: ``found`` False means ``NO_CHECKPOINT``."""
    found: bool
    d: int | None = None            # newest durable batch
    m: int | None = None            # snapshot chosen
    gen: int = 0                    # the generation from now on
    rolled_back: int = 0            # undo records applied
    staleness: int = 0              # the bound in force from now on
    writes: dict = field(default_factory=dict)      # media line -> value written, in order
    reads: list = field(default_factory=list)       # media lines read, in order


@dataclass
class Checkpoint:
    """What a device's checkpoint records say before a ``RECOVER`` (a pool's host reads
    them from every device to choose the pool's durable batch): the newest intact
    commit record's batch ``committed`` (``None`` without one), its generation, slot
    and bound ``k``, and per snapshot slot the batch of its intact header, or ``None``."""
    committed: int | None
    gen: int = 0
    k: int = 0
    slot: int = 0
    slots: tuple = (None, None)

    @property
    def snapshots(self):
        """The batches of the snapshots a recovery may use: intact, not after the commit."""
        return tuple(b for b in self.slots if b is not None and self.committed is not None
                     and b <= self.committed)


def checkpoint_lines(config):
    """The media lines :func:`newest_checkpoint` reads: the commit slots, then both
    snapshot headers."""
    return [config.commit_base + s for s in range(config.commit_lines)] + list(config.snapshot_base)


def newest_checkpoint(config, read):
    """The :class:`Checkpoint` of the media whose line ``a`` is ``read(a)``, from the
    lines of :func:`checkpoint_lines`, read in that order (RECOVER's steps 1 and 2)."""
    cfg = config
    best = None                                         # (gen, batch, slot, K)
    for slot in range(cfg.commit_lines):
        h = valid_header(read(cfg.commit_base + slot), COMMIT)
        if h is not None and (best is None or (h.gen, h.batch) > best[:2]):
            best = (h.gen, h.batch, slot, h.a & 0xFF)
    slots = tuple(None if h is None else h.batch
                  for h in (valid_header(read(base), SNAPSHOT) for base in cfg.snapshot_base))
    if best is None:
        return Checkpoint(None, slots=slots)
    return Checkpoint(best[1], gen=best[0], slot=best[2], k=best[3], slots=slots)


def recover(config, media, staleness, target=None):
    """Recover ``media`` (a mutable sequence of line integers, indexed by media line) in place.

    ``staleness`` (the control register) only counts when there is no checkpoint;
    otherwise the bound stored in the newest commit record does. Only the lines in
    ``Recovery.reads`` are read: the commit records, the snapshot and ring headers,
    and the records the walk back from the ring header meets.

    ``target`` (a device of a pool, ``RECOVER``'s batch): roll back to that batch if it
    is older than the newest commit, whatever the snapshots (the host chose it from
    every device's); ``m`` is then the newest snapshot not after D, or ``None``, and
    the snapshots after D, of the timeline the recovery ends, are erased."""
    cfg = config
    reads = []

    def read(addr):
        reads.append(addr)
        return media[addr]

    ckpt = newest_checkpoint(cfg, read)
    rings = [valid_header(read(cfg.ring_base + k), RING) for k in range(RING_HEADERS)]
    found = ckpt.committed is not None
    limit = ckpt.committed if target is None or not found else min(ckpt.committed, target)
    usable = [b for b in ckpt.snapshots if b <= limit]
    if not found or (target is None and not usable):
        return Recovery(found=False, gen=ckpt.gen + 1 if found else 0, staleness=staleness,
                        reads=reads)
    gen, committed, slot, k = ckpt.gen, ckpt.committed, ckpt.slot, ckpt.k
    m = max(usable, default=None)
    d = min(committed, m + k) if target is None else limit
    result = Recovery(found=True, d=d, m=m, gen=gen + 1, staleness=k, reads=reads)

    # The ring header of generation g that says the most (the first on a tie).
    ring = None
    for h in rings:
        if h is not None and h.gen == gen and (ring is None or h.a > ring.a):
            ring = h
    if ring is not None and ring.a != 0 and ring.batch > d:
        _walk(cfg, media, read, result, gen=gen, d=d, lsn=ring.a - 1, at=ring.b,
              groups=min(ring.a, cfg.log_groups))
    if target is not None:
        for base, b in zip(cfg.snapshot_base, ckpt.slots):
            if b is not None and b > d:
                media[base] = 0
                result.writes[base] = 0
    seal = cfg.commit_base + (slot + 1) % cfg.commit_lines
    media[seal] = commit_record(gen=gen + 1, batch=d, staleness=k)
    result.writes[seal] = media[seal]
    return result


def _walk(cfg, media, read, result, *, gen, d, lsn, at, groups):
    """Roll back the undo groups before slot ``at``, newest record first, while they are
    of generation ``gen``, after batch ``d`` and end at LSN ``lsn``, and their records
    intact; read at most ``groups`` slots. Like the device, a walked slot is read whole
    (its group line, then every record's lines, the newest first), whatever its count."""
    lpr = cfg.lines_per_row
    last = cfg.log_base + (cfg.log_groups - 1) * cfg.group_lines
    for _ in range(groups):
        at = at - cfg.group_lines if at != cfg.log_base else last
        got = decode_group_line(read(at))
        if got is None:
            return
        fields, entries = got
        if (fields["gen"] != gen or fields["batch"] <= d
                or (fields["lsn"] + len(entries) - 1) & 0xFFFFFFFF != lsn):
            return
        lines = {k: [read(at + 1 + k * lpr + j) for j in range(lpr)]
                 for k in reversed(range(GROUP_RECORDS))}
        for k in reversed(range(len(entries))):
            header = decode_record(fields, entries, k, lines[k])
            if header is None:
                return
            for j, line in enumerate(lines[k]):
                media[header.b + j] = line
                result.writes[header.b + j] = line
            result.rolled_back += 1
            lsn = (lsn - 1) & 0xFFFFFFFF


def snapshot_params(config, header, lines):
    """The float32 MLP parameters a snapshot slot holds: ``header`` its valid header
    (:func:`~trainingcxl.spec.records.valid_header`), ``lines`` the ``header.a`` data
    lines after it; ``None`` if they do not match the header's checksum (a torn pull)."""
    if checksum(lines) != header.b:
        return None
    raw = b"".join(x.to_bytes(LINE_BYTES, "little") for x in lines)
    return np.frombuffer(raw, dtype=np.float32)[:config.mlp_params].copy()

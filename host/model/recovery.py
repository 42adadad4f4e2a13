"""The reference of the device's RECOVER: what it must find and write, on a media image.

Mirrors :class:`trainingcxl.hdl.checkpoint.engine.CheckpointEngine` step by
step (docs/design.md, "Checkpoint protocol"), so a test can hand both the same PMEM contents,
including torn records, and compare the results bit for bit.
"""

from dataclasses import dataclass, field

from trainingcxl.spec.records import COMMIT, SNAPSHOT, commit_record, decode_undo, valid_header

__all__ = ["Recovery", "recover"]


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


def recover(config, media, staleness):
    """Recover ``media`` (a mutable sequence of line integers, indexed by media line) in place.

    ``staleness`` (the control register) only counts when there is no checkpoint;
    otherwise the bound stored in the newest commit record does."""
    cfg = config
    best = None                                         # (gen, batch, slot)
    for slot in range(cfg.commit_lines):
        h = valid_header(media[cfg.commit_base + slot], COMMIT)
        if h is not None and (best is None or (h.gen, h.batch) > best[:2]):
            best = (h.gen, h.batch, slot, h.a & 0xFF)
    snaps = [valid_header(media[base], SNAPSHOT) for base in cfg.snapshot_base]
    usable = [h.batch for h in snaps if h is not None and best is not None and h.batch <= best[1]]
    if best is None or not usable:
        return Recovery(found=False, gen=0 if best is None else best[0] + 1, staleness=staleness)
    gen, committed, slot, k = best
    m = max(usable)
    d = min(committed, m + k)

    def record(s):
        at = cfg.log_base + s * cfg.rec_lines
        got = decode_undo([media[at + j] for j in range(cfg.rec_lines)])
        if got is None or got[0].gen != gen or got[0].batch <= d:
            return None
        return got

    newest = None                                       # (lsn, slot)
    for s in range(cfg.log_slots):
        got = record(s)
        if got is not None and (newest is None or got[0].a > newest[0]):
            newest = (got[0].a, s)
    result = Recovery(found=True, d=d, m=m, gen=gen + 1, staleness=k)
    if newest is not None:
        for back in range(cfg.log_slots):               # newest first
            got = record((newest[1] - back) % cfg.log_slots)
            if got is None:
                continue
            header, lines = got
            for j, line in enumerate(lines):
                media[header.b + j] = line
                result.writes[header.b + j] = line
            result.rolled_back += 1
    seal = cfg.commit_base + (slot + 1) % cfg.commit_lines
    media[seal] = commit_record(gen=gen + 1, batch=d, staleness=k)
    result.writes[seal] = media[seal]
    return result

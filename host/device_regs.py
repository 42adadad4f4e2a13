"""How the host reads and writes the device's registers and snapshot slots, shared by the
simulated bench (``sim/device_tb.py``) and the board driver (``host/board.py``)."""

import numpy as np

from trainingcxl.spec.registers import Reg

from trainingcxl.spec.config import LINE_BYTES
from trainingcxl.spec.records import SNAPSHOT, checksum, valid_header

__all__ = ["geometry_word", "desc_op_word", "gpu_window_writes", "decode_checkpoint_state",
           "read_snapshot"]


def geometry_word(config):
    """What the ``GEOMETRY`` register of a device built from ``config`` reads."""
    return (config.n_tables | config.dim << 8 | config.lines_per_row << 24
            | config.fixed.frac_bits << 32 | config.max_pooling << 40)


def desc_op_word(op, batch, *, relaxed=False, nolog=False, coalesced=False):
    """The ``DESC_OP`` register value of one descriptor."""
    return op.value | int(relaxed) << 8 | int(nolog) << 9 | int(coalesced) << 10 | batch << 32


def gpu_window_writes(config, layout):
    """The ``(register, value)`` writes that confine every descriptor's arrays to the
    lines of ``layout`` (:class:`~.host_layout.HostLayout`); none on a device built
    without the check (``Config.gpu_window``), which has no such registers."""
    if not config.gpu_window:
        return []
    return [(Reg.GPU_BASE, layout.base * LINE_BYTES),
            (Reg.GPU_LIMIT, (layout.base + layout.lines) * LINE_BYTES)]


def _batch(value):
    return value & 0xFFFFFFFF if value >> 32 & 1 else None


def decode_checkpoint_state(state, committed, snapshot, durable):
    """``CKPT_STATE``, ``COMMITTED``, ``SNAPSHOT`` and ``DURABLE``, decoded."""
    return {
        "ready": bool(state & 1), "logging": bool(state >> 1 & 1),
        "snapshot_busy": bool(state >> 2 & 1), "snapshot_failed": bool(state >> 3 & 1),
        "staleness": state >> 8 & 0xFF, "gen": state >> 16 & 0xFFFF,
        "live_records": state >> 32,
        "committed": _batch(committed), "snapshot": _batch(snapshot), "durable": _batch(durable),
    }


async def read_snapshot(config, read_media, slot_batch):
    """The MLP parameters (float32) in the valid snapshot slot of batch ``slot_batch``,
    checked against the slot header's checksums; ``None`` if no slot holds one.
    ``read_media(first, count)`` reads media lines through CXL.mem."""
    for base in config.snapshot_base:
        header = valid_header((await read_media(base, 1))[0], SNAPSHOT)
        if header is None or header.batch != slot_batch:
            continue
        lines = await read_media(base + 1, header.a)
        if checksum(lines) != header.b:
            raise AssertionError(f"snapshot of batch {slot_batch}: valid header, torn data")
        raw = b"".join(x.to_bytes(LINE_BYTES, "little") for x in lines)
        return np.frombuffer(raw, dtype=np.float32)[:config.mlp_params].copy()
    return None

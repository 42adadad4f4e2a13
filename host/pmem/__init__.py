"""The durable state of a media file, from Python, without a simulator.

``trainingcxl.host.pmem.open(FILE)`` reads a media file that ``train --pmem FILE``
wrote (or left when it was killed) and recovers it in software, as the device's
``RECOVER`` would (:func:`trainingcxl.host.model.recovery.recover`), on a private
copy of the lines it changes: the file is never written, so it is safe on a file
a run has just been killed on, and a later ``train --resume`` finds it as it was.

>>> from trainingcxl.host import pmem
>>> state = pmem.open("run.pmem")
>>> state.durable, state.snapshot_batch          # D and m
>>> state.tables[0]                              # int32 fixed point, (rows, dim)
>>> state.float_tables()[0]                      # float32
>>> state.export("model/")                       # what train --export writes

See docs/pmem.md, "The media as a file".
"""

from dataclasses import dataclass

import numpy as np

from trainingcxl.spec.config import LINE_BYTES
from trainingcxl.spec.records import SNAPSHOT, valid_header
from trainingcxl.host.model.dlrm import DenseModel
from trainingcxl.host.model.export import export_model
from trainingcxl.host.model.fixed import from_fixed
from trainingcxl.host.model.recovery import recover, snapshot_params
from .media_file import MediaFile, MediaFileError, create

__all__ = ["open", "DurableState", "MediaFile", "MediaFileError", "create"]


class _Overlay:
    """The file's lines as integers, with the writes of a recovery kept aside."""

    def __init__(self, lines):
        self.lines, self.writes = lines, {}

    def __getitem__(self, addr):
        if addr in self.writes:
            return self.writes[addr]
        return int.from_bytes(self.lines[addr].tobytes(), "little")

    def __setitem__(self, addr, value):
        self.writes[addr] = value

    def __len__(self):
        return len(self.lines)


@dataclass
class DurableState:
    """What a media file holds once recovered: the batch every table is at, the MLP
    snapshot chosen, and the tables and parameters themselves.

    ``path``, ``config`` and ``run`` are the file, its configuration and the run it
    belongs to. ``found`` is false if the media holds no checkpoint yet (killed before
    its first commit); the figures below are then ``None``. ``durable`` is D, the
    newest durable batch (every table is as it was after it); ``snapshot_batch`` m,
    the batch of the MLP snapshot recovery chose (``D - K <= m <= D``); ``staleness``
    K, from the newest commit record; ``rolled_back`` the undo records the recovery
    applied (records of batches after D still in the log). ``tables`` are int32 fixed
    point, ``(rows, dim)`` per table, as after batch D; ``mlp_params`` the snapshot's
    float32 parameters (``DenseModel.load_parameters`` order); ``recoveries`` the
    file's journal, ``(D, m)`` of every recovery the run made.
    """
    path: str
    config: object
    run: dict
    found: bool
    durable: int | None
    snapshot_batch: int | None
    staleness: int | None
    rolled_back: int
    tables: list | None
    mlp_params: np.ndarray | None
    recoveries: list

    def float_tables(self):
        """The tables in float32."""
        return [from_fixed(t, self.config.fixed.frac_bits).astype(np.float32) for t in self.tables]

    def dense_model(self):
        """The MLPs of the snapshot as a :class:`~trainingcxl.host.model.dlrm.DenseModel`."""
        model = DenseModel(self.config, self.run["seed"])
        model.load_parameters(self.mlp_params)
        return model

    def export(self, folder):
        """Write the model as ``train --export`` does (``model.npz``: float32 arrays named
        as a PyTorch DLRM's state dict, and ``model.json``); returns the ``.npz`` path."""
        if not self.found:
            raise MediaFileError(f"{self.path} holds no checkpoint yet: nothing to export")
        return export_model(self.config, self.tables, self.dense_model(), folder)


def open(path, config=None):
    """Open the media file ``path`` read-only and recover its durable state in software;
    returns a :class:`DurableState`. A file that is not a media file, of another
    format version or truncated, or (given ``config``) of another configuration,
    raises :class:`MediaFileError` (one line)."""
    media = MediaFile(path)
    if config is not None:
        media.check_config(config)
    cfg = media.config
    lines = _Overlay(media.lines("r"))
    result = recover(cfg, lines, staleness=media.run["staleness"])
    base = dict(path=str(path), config=cfg, run=media.run, found=result.found,
                recoveries=media.recoveries(), rolled_back=result.rolled_back)
    if not result.found:
        return DurableState(**base, durable=None, snapshot_batch=None, staleness=None,
                            tables=None, mlp_params=None)
    lpr = cfg.lines_per_row
    tables = []
    for t, rows in enumerate(cfg.tables):
        first = cfg.table_base[t]
        table = np.array(lines.lines[first:first + rows * lpr]).view("<i4").reshape(rows, cfg.dim)
        table = table.astype(np.int32)
        for addr, value in lines.writes.items():
            if first <= addr < first + rows * lpr:
                k = addr - first
                row = np.frombuffer(value.to_bytes(LINE_BYTES, "little"), dtype="<i4")
                table.reshape(-1, LINE_BYTES // 4)[k] = row
        tables.append(table)
    return DurableState(**base, durable=result.d, snapshot_batch=result.m,
                        staleness=result.staleness, tables=tables,
                        mlp_params=_snapshot(cfg, lines, result.m))


def _snapshot(cfg, lines, batch):
    """The MLP parameters in the valid snapshot slot of ``batch``, checksum checked."""
    for base in cfg.snapshot_base:
        header = valid_header(lines[base], SNAPSHOT)
        if header is None or header.batch != batch:
            continue
        params = snapshot_params(cfg, header, [lines[base + 1 + k] for k in range(header.a)])
        if params is None:
            raise MediaFileError(f"the snapshot of batch {batch}: a valid header over torn data")
        return params
    raise MediaFileError(f"recovery chose the snapshot of batch {batch}, which no slot holds")

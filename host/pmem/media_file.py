"""The PMEM media as a file that outlives the process (``train --pmem FILE``).

The simulator maps the media's words straight from the file
(``sim/dpi/ram_backdoor.cpp``), so every line the PMEM controller writes, once it
has left the volatile write-pending queue, is in the file the moment it is
written, and nothing else is: a killed process leaves the file as a power
failure at that cycle would. The layout (docs/pmem.md, "The media as a file"):

* bytes 0-63: :data:`MAGIC`, the format version, the length of the description,
  the number of journal entries (all little-endian);
* bytes 64 to :data:`JOURNAL_AT`: the description, JSON: the configuration, its
  digest, the table shapes and the run the media belongs to (its seed, data,
  system, staleness bound and order, which a resumed run must repeat);
* :data:`JOURNAL_AT` to :data:`MEDIA_AT`: the journal, a ``(D, m)`` pair of int64
  per recovery the run made (a power failure or a resume), in order: what a
  replay of the golden model needs to follow a run whose MLP was restored from
  an older snapshot (K >= 1);
* from :data:`MEDIA_AT` (a page boundary): the media, one 64-byte line after the
  other, ``Config.media_lines`` of them.

Everything here reads and writes the description and the journal; the media's
lines are the simulator's, or :mod:`trainingcxl.host.pmem`'s read-only view.
"""

import datetime
import json
import os
import struct
from pathlib import Path

import numpy as np

from trainingcxl.spec.config import LINE_BYTES, Config

__all__ = ["MAGIC", "VERSION", "JOURNAL_AT", "MEDIA_AT", "MediaFileError", "MediaFile",
           "RUN_FIELDS", "create"]

MAGIC = b"TCXLPMEM"
#: 2: the persistence domain is the energy-backed buffer in front of the media (undo
#: records of the checkpoint region never drain, MLP snapshots every K batches); a
#: file of version 1 was written behind the volatile queue, by other rules.
VERSION = 2
_FIXED = struct.Struct("<8sIIQ")            # magic, version, description bytes, journal entries
_ENTRY = struct.Struct("<qq")               # D, m
#: Where the journal starts, and where the media's first line does.
JOURNAL_AT = 1 << 15
MEDIA_AT = 1 << 16
#: The fields of a training job that make the run the media belongs to.
RUN_FIELDS = ("seed", "data", "batch_size", "min_pooling", "zipf_alpha", "system",
              "staleness", "relaxed", "checkpointing")


class MediaFileError(ValueError):
    """A media file that cannot be used as asked; the message is one line."""


def _size(config):
    return MEDIA_AT + config.media_lines * LINE_BYTES


def create(path, config, run, *, overwrite=False):
    """A new media file at ``path`` for ``config`` and the run ``run`` (a dict of
    :data:`RUN_FIELDS`), its media blank (all zero: the pages are allocated as they
    are written). An existing media file is replaced only with ``overwrite``, and
    nothing else ever is; the new file appears whole or not at all."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        if not _is_media_file(path):
            raise MediaFileError(f"{path} exists and is not a trainingcxl media file: "
                                 f"refusing to replace it (name a new file)")
        if not overwrite:
            raise MediaFileError(f"{path} exists (the media of a run): --resume continues "
                                 f"that run, --overwrite starts a new one in its place")
    description = json.dumps({
        "format": "trainingcxl PMEM media", "config": config.to_dict(),
        "config_digest": config.digest(), "tables": list(config.tables), "dim": config.dim,
        "media_lines": config.media_lines, "line_bytes": LINE_BYTES,
        "run": {k: run[k] for k in RUN_FIELDS},
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }, sort_keys=True).encode()
    if _FIXED.size + len(description) > JOURNAL_AT:
        raise MediaFileError(f"the description of this configuration takes "
                             f"{len(description):,} bytes, more than the header holds")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(_FIXED.pack(MAGIC, VERSION, len(description), 0))
            f.seek(64)
            f.write(description)
            f.truncate(_size(config))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return MediaFile(path)


def _is_media_file(path):
    """``path`` is a regular file that begins as a media file does (of any version)."""
    try:
        with open(path, "rb") as f:
            return Path(path).is_file() and f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


class MediaFile:
    """An existing media file: its description checked on opening.

    Attributes
    ----------
    path : Path
    config : Config
        The configuration the media was made for.
    run : dict
        The run it belongs to (:data:`RUN_FIELDS`).
    description : dict
        Everything the header says.
    """

    def __init__(self, path):
        self.path = Path(path)
        if not self.path.is_file():
            raise MediaFileError(f"{self.path}: no such media file")
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            head = f.read(JOURNAL_AT)
        if len(head) < _FIXED.size or head[:len(MAGIC)] != MAGIC:
            raise MediaFileError(f"{self.path} is not a trainingcxl media file (no "
                                 f"{MAGIC.decode()} header)")
        _, version, length, _ = _FIXED.unpack_from(head)
        if version != VERSION:
            raise MediaFileError(f"{self.path} is a media file of format version {version}; "
                                 f"this trainingcxl reads version {VERSION}")
        try:
            self.description = json.loads(head[64:64 + length])
            self.config = Config.from_dict(self.description["config"])
        except (ValueError, KeyError, TypeError) as e:
            raise MediaFileError(f"{self.path}: its header is damaged ({e})") from None
        self.run = self.description["run"]
        if size < _size(self.config):
            raise MediaFileError(f"{self.path} is truncated: {size:,} bytes, its media of "
                                 f"{self.config.media_lines:,} lines needs {_size(self.config):,}")

    def check_config(self, config):
        """Refuse (:class:`MediaFileError`) a configuration other than the file's."""
        if config.digest() == self.config.digest():
            return
        mine, theirs = self.config.to_dict(), config.to_dict()
        differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        raise MediaFileError(f"{self.path} holds the media of another configuration "
                             f"(it differs in {', '.join(differ)}): use its own, or "
                             f"--overwrite to start anew")

    def recoveries(self):
        """The journal: ``(D, m)`` of every recovery the run made, in order."""
        with open(self.path, "rb") as f:
            count = _FIXED.unpack(f.read(_FIXED.size))[3]
            f.seek(JOURNAL_AT)
            raw = f.read(count * _ENTRY.size)
        return [_ENTRY.unpack_from(raw, k * _ENTRY.size) for k in range(count)]

    def record_recovery(self, d, m):
        """Append ``(d, m)`` to the journal: the entry first, then the count, so a process
        killed between the two leaves the journal as it was (and the next recovery,
        finding the same durable batch, records it again)."""
        with open(self.path, "r+b") as f:
            count = _FIXED.unpack(f.read(_FIXED.size))[3]
            if JOURNAL_AT + (count + 1) * _ENTRY.size > MEDIA_AT:
                raise MediaFileError(f"{self.path}: its journal is full ({count} recoveries)")
            f.seek(JOURNAL_AT + count * _ENTRY.size)
            f.write(_ENTRY.pack(d, m))
            f.flush()
            f.seek(16)
            f.write(struct.pack("<Q", count + 1))

    def lines(self, mode="r"):
        """The media as a ``(media_lines, 64)`` byte array mapped from the file (``mode``
        ``"r"``: read-only; ``"r+"``: writes reach the file)."""
        return np.memmap(self.path, dtype=np.uint8, mode=mode, offset=MEDIA_AT,
                         shape=(self.config.media_lines, LINE_BYTES))

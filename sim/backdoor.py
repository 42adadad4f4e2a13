"""The benches' direct view of the backdoor RAMs (``hdl/common/ram.py``).

In a Verilator build a RAM with a ``backdoor`` name keeps its words in a file
that the simulator maps (``sim/dpi/ram_backdoor.cpp``); :func:`ram_files` makes
the files of one run, and :func:`ram_array` maps one into the bench as a numpy
array of ``(depth, stride)`` bytes, so a bench loads or reads a whole table in
one copy. Both sides map the same pages: a write of either is seen by the
other at once. The bench only touches them while nothing is in flight.
"""

import contextlib
import os
import shutil
import tempfile

import numpy as np

__all__ = ["RAM_ENV", "RAM_OFFSET_ENV", "ram_files", "ram_array", "SdramLines"]

#: The environment variable naming the file of the RAM ``{name}``.
RAM_ENV = "TRAININGCXL_RAM_{}"
#: The environment variable giving the byte of that file its words start at (0 if unset).
RAM_OFFSET_ENV = "TRAININGCXL_RAM_{}_OFFSET"


def _stride(nbytes):
    return 1 << max(0, (nbytes - 1).bit_length())


@contextlib.contextmanager
def ram_files(names, kept=None):
    """Empty files for the RAMs ``names`` of one run, in memory where the machine has
    a ``/dev/shm``; yields the environment that names them; removes them afterwards.
    ``kept`` maps a RAM's name to ``(path, offset)``: a file of the caller's, whose
    words start at byte ``offset``, used as it is and left in place."""
    shm = "/dev/shm"
    where = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    folder = tempfile.mkdtemp(prefix="trainingcxl-ram-", dir=where)
    kept = kept or {}
    try:
        env = {}
        for name in names:
            if name in kept:
                path, offset = kept[name]
                env[RAM_ENV.format(name)] = os.path.abspath(path)
                env[RAM_OFFSET_ENV.format(name)] = str(offset)
                continue
            path = os.path.join(folder, f"{name}.bin")
            open(path, "wb").close()
            env[RAM_ENV.format(name)] = path
        yield env
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def ram_array(name, depth, width_bits):
    """The words of RAM ``name`` as a writable ``uint8`` array of shape ``(depth, stride)``
    (little-endian words, ``stride`` their bytes rounded up to a power of two), or
    ``None`` when this simulation has no backdoor for it (Icarus, or no file)."""
    path = os.environ.get(RAM_ENV.format(name))
    if not path:
        return None
    stride = _stride((width_bits + 7) // 8)
    offset = int(os.environ.get(RAM_OFFSET_ENV.format(name), 0))
    size = depth * stride
    with open(path, "r+b") as f:
        if os.fstat(f.fileno()).st_size < offset + size:
            f.truncate(offset + size)
    return np.memmap(path, dtype=np.uint8, mode="r+", shape=(depth, stride), offset=offset)


class SdramLines:
    """The media lines an SDRAM chip model holds (its backdoor RAM ``name``), indexed and
    sliced like a ``(lines, 64)`` byte array, for :meth:`Device.load_tables` and
    :meth:`Device.read_tables`.

    The controller puts line ``n`` in column ``(n % per_row) * words`` of bank
    ``(n / per_row) % banks``, row ``n / (per_row * banks)``
    (:class:`~trainingcxl.hdl.sdram.controller.SdramController`); the model
    keeps its words bank, row, column, so each line is ``words`` words in a row,
    beat 0 lowest.
    """

    def __init__(self, words, timing):
        self._t = timing
        per_row = timing.cols // timing.words_per_line
        self._grid = words.reshape(timing.banks, timing.rows, per_row, -1)
        self._per_row = per_row

    @classmethod
    def open(cls, timing, name="sdram"):
        """The view of this simulation's chip model, or ``None`` without its backdoor."""
        words = ram_array(name, timing.banks * timing.rows * timing.cols, timing.dq_bits)
        return None if words is None else cls(words, timing)

    def _where(self, key):
        n = np.arange(self._t.lines)[key]
        return (n // self._per_row) % self._t.banks, n // (self._per_row * self._t.banks), \
            n % self._per_row

    def __len__(self):
        return self._t.lines

    def __getitem__(self, key):
        return self._grid[self._where(key)]

    def __setitem__(self, key, value):
        self._grid[self._where(key)] = value

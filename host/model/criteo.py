"""Criteo-format data: a loader for the Kaggle/Terabyte TSV layout and a sample generator.

A line is ``label <TAB> I1..I13 <TAB> C1..C26``: a 0/1 label, 13 integer
features and 26 categorical features written as hexadecimal strings; any
feature may be empty (missing). The loader maps dense value ``v`` to
``log(1 + max(v, 0))`` (missing: 0), as the DLRM reference preprocessing does,
and categorical column ``t`` to row ``int(value, 16) % rows[t]`` of table ``t``
(missing: row 0). A configuration with ``T`` tables uses the first ``T``
categorical columns; every bag holds exactly one row (pooling factor 1).
"""

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainingcxl.host.model.data import Batch

__all__ = ["CriteoFormatError", "CriteoDataset", "write_sample", "N_DENSE", "N_CAT"]

N_DENSE = 13
N_CAT = 26


class CriteoFormatError(ValueError):
    """A malformed line; the message gives the file, line number and reason."""


_INT = re.compile(r"-?[0-9]{1,18}")
_HEX = re.compile(r"[0-9a-fA-F]{1,16}")


def _parse(line, where):
    fields = line.rstrip("\n").rstrip("\r").split("\t")
    if len(fields) != 1 + N_DENSE + N_CAT:
        raise CriteoFormatError(f"{where}: {len(fields)} columns, expected {1 + N_DENSE + N_CAT} "
                                f"(label, {N_DENSE} integer, {N_CAT} categorical)")
    if fields[0] not in ("0", "1"):
        raise CriteoFormatError(f"{where}: label {fields[0]!r} is not 0 or 1")
    dense = np.zeros(N_DENSE, dtype=np.float32)
    for k, text in enumerate(fields[1:1 + N_DENSE]):
        if text:
            if not _INT.fullmatch(text):
                raise CriteoFormatError(f"{where}: integer column I{k + 1} is {text[:40]!r}, "
                                        f"not an integer of at most 18 digits")
            dense[k] = math.log1p(max(int(text), 0))
    cats = []
    for k, text in enumerate(fields[1 + N_DENSE:]):
        if text:
            if not _HEX.fullmatch(text):
                raise CriteoFormatError(f"{where}: categorical column C{k + 1} is {text[:40]!r}, "
                                        f"not hexadecimal (at most 16 digits)")
            cats.append(int(text, 16))
        else:
            cats.append(None)
    return int(fields[0]), dense, cats


@dataclass
class CriteoDataset:
    """All samples of a Criteo-format file, hashed into the configuration's tables.

    ``on_error="raise"`` stops at the first malformed line with its number;
    ``"skip"`` drops it and counts it in ``skipped`` (the first few reasons
    are kept in ``problems``). Batch ``i`` takes samples ``i*B .. i*B+B-1``,
    wrapping around the file.
    """
    config: object
    path: Path
    batch_size: int
    on_error: str = "raise"

    def __post_init__(self):
        cfg = self.config
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {self.on_error!r}")
        if cfg.n_tables > N_CAT:
            raise ValueError(f"the configuration has {cfg.n_tables} tables; Criteo data has "
                             f"only {N_CAT} categorical columns")
        if cfg.model.dense_features != N_DENSE:
            raise ValueError(f"Criteo data has {N_DENSE} dense features; the configuration's "
                             f"model.dense_features is {cfg.model.dense_features}")
        if self.batch_size * cfg.n_tables > cfg.max_bags:
            raise ValueError(f"batch_size {self.batch_size} x {cfg.n_tables} tables exceeds "
                             f"max_bags {cfg.max_bags}")
        self.path = Path(self.path)
        labels, dense, rows = [], [], []
        self.skipped, self.problems = 0, []
        with open(self.path, "rb") as f:
            for n, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("ascii")
                    if not line.strip():
                        continue
                    label, d, cats = _parse(line, f"{self.path}:{n}")
                except (CriteoFormatError, UnicodeDecodeError) as e:
                    problem = e if isinstance(e, CriteoFormatError) else CriteoFormatError(
                        f"{self.path}:{n}: a byte that is not ASCII at column {e.start + 1}")
                    if self.on_error == "raise":
                        raise problem from None
                    self.skipped += 1
                    if len(self.problems) < 5:
                        self.problems.append(str(problem))
                    continue
                rows.append([0 if c is None else c % r for c, r in zip(cats, cfg.tables)])
                labels.append(label)
                dense.append(d)
        if not labels:
            raise CriteoFormatError(f"{self.path}: no usable lines")
        self.labels = np.asarray(labels, dtype=np.float32)
        self.dense = np.stack(dense)
        self.rows = np.asarray(rows, dtype=np.uint32)

    def __len__(self):
        return len(self.labels)

    def batch(self, i):
        b, n = self.batch_size, len(self)
        take = (np.arange(b) + i * b) % n
        n_bags = b * self.config.n_tables
        return Batch(index=i, indices=self.rows[take].reshape(-1).copy(),
                     offsets=np.arange(n_bags + 1, dtype=np.uint32), batch_size=b,
                     n_tables=self.config.n_tables, dense=self.dense[take].copy(),
                     labels=self.labels[take].copy())


def write_sample(path, lines=2000, seed=0, *, missing=0.05, signal=2.5):
    """Write a Criteo-format file with a learnable signal; a pure function of the arguments.

    Each categorical column draws from its own vocabulary of random 32-bit
    ids with Zipf popularity; each id and each dense column has a hidden
    weight, and the label is drawn from the sigmoid of their sum. Column
    ``C{k+1}``'s weights shrink as ``0.6**k``, so a configuration that uses
    only the first few columns still sees most of the signal. Values go
    missing with probability ``missing``.
    """
    rng = np.random.default_rng([seed, 0xC417E0])
    vocab = [rng.integers(0, 2**32, size=int(rng.integers(20, 300))) for _ in range(N_CAT)]
    weights = [rng.standard_normal(len(v)) for v in vocab]
    dense_w = rng.standard_normal(N_DENSE)
    out = []
    for _ in range(lines):
        logit = 0.0
        cats = []
        for k in range(N_CAT):
            r = min(int(rng.zipf(1.3)) - 1, len(vocab[k]) - 1)
            logit += weights[k][r] * 0.6 ** k
            cats.append("" if rng.random() < missing else f"{vocab[k][r]:08x}")
        ints = rng.geometric(0.05, size=N_DENSE) - 1
        logit += float((np.log1p(ints) - 2.5) @ dense_w) / (2 * math.sqrt(N_DENSE))
        dense = ["" if rng.random() < missing else str(int(v)) for v in ints]
        label = int(rng.random() < 1 / (1 + math.exp(-signal * logit)))
        out.append("\t".join([str(label), *dense, *cats]))
    Path(path).write_text("\n".join(out) + "\n")
    return Path(path)

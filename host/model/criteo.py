"""Criteo-format data: a loader for the Kaggle/Terabyte TSV layout and a sample generator.

A line is ``label <TAB> I1..I13 <TAB> C1..C26``: a 0/1 label, 13 integer
features and 26 categorical features written as hexadecimal strings; any
feature may be empty (missing). The loader maps dense value ``v`` to
``log(1 + max(v, 0))`` (missing: 0), as the DLRM reference preprocessing does,
and categorical column ``t`` to row ``int(value, 16) % rows[t]`` of table ``t``
(missing: row 0). A configuration with ``T`` tables uses the first ``T``
categorical columns; every bag holds exactly one row (pooling factor 1).

Parsing is vectorised over blocks of lines (:func:`iter_chunks`): numpy finds
the lines and their tabs in the raw bytes, checks every field's characters
and length at once, and assembles integer and hexadecimal values from
fixed-width windows of the bytes. Only a line the block check refuses goes
through the exact per-line parser (:func:`_parse`), which says why.
"""

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainingcxl.host.model.data import Batch
from trainingcxl.host.model.evaluate import TestSet

__all__ = ["CriteoFormatError", "CriteoChunk", "iter_chunks", "parse_block", "CriteoDataset",
           "write_sample", "N_DENSE", "N_CAT"]

N_DENSE = 13
N_CAT = 26
N_FIELDS = 1 + N_DENSE + N_CAT
#: Longest integer (digits, sign apart) and hexadecimal field.
INT_DIGITS, HEX_DIGITS = 18, 16
#: Reasons kept for skipped lines.
KEEP_PROBLEMS = 5


class CriteoFormatError(ValueError):
    """A malformed line; the message gives the file, line number and reason."""


# -- the exact parser of one line: the reference, and the reason for a refused line ----

_INT = re.compile(r"-?[0-9]{1,18}")
_HEX = re.compile(r"[0-9a-fA-F]{1,16}")


def _parse(line, where):
    fields = line.rstrip("\n").rstrip("\r").split("\t")
    if len(fields) != N_FIELDS:
        raise CriteoFormatError(f"{where}: {len(fields)} columns, expected {N_FIELDS} "
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


def _problem(raw, where):
    """Why the exact parser refuses ``raw`` (one line, bytes), or None if it does not."""
    try:
        line = raw.decode("ascii")
        if line.strip():
            _parse(line, where)
    except UnicodeDecodeError as e:
        return CriteoFormatError(f"{where}: a byte that is not ASCII at column {e.start + 1}")
    except CriteoFormatError as e:
        return e
    return None


# -- the block parser ------------------------------------------------------------------
#
# Fields are read as 64-bit words of 8 bytes that end at the field's end, and
# decoded eight characters at a time with byte-wise arithmetic inside the words
# (SWAR): positions before the field become '0' characters, a byte-wise range
# check validates every character, and digits are combined in pairs, fours
# and eights by shifts and multiplications. Every byte of a line that reaches
# this point is ASCII, so a byte-wise sum below 0x100 never carries into the
# next byte.

_U64 = np.uint64


def _rep(byte):
    return _U64(byte * 0x0101010101010101)


_HIGH, _LOW4, _ZEROS = _rep(0x80), _rep(0x0F), _rep(0x30)


def _keep(width):
    """``[length, word]``: the bytes of the last ``length`` positions of a ``width``-byte window."""
    pos = np.arange(width).reshape(-1, 8)
    keep = pos[None] >= width - np.arange(width + 1)[:, None, None]
    return (keep * (_U64(0xFF) << (_U64(8) * np.arange(8, dtype=np.uint64)))).sum(axis=-1, dtype=np.uint64)


_KEEP_INT, _KEEP_HEX = _keep(24), _keep(16)
_PAD = 24


def _in_range(x, lo, hi):
    """0x80 in every byte of ``x`` within ``[lo, hi]``, 0 elsewhere (bytes below 0x80)."""
    return (x + _rep(0x80 - lo)) & ~(x + _rep(0x7F - hi)) & _HIGH


def _words(padded, ends, width):
    """The ``width // 8`` little-endian words of bytes ``[end - width, end)`` for every field end."""
    view = np.ndarray((len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
    offsets = np.arange(_PAD - width, _PAD, 8)
    return view[ends[..., None] + offsets]


def _fill(words, keep):
    return (words & keep) | (_ZEROS & ~keep)


def _decimal8(x):
    """The value of the 8 decimal digits of each word (the first character most significant)."""
    x = x & _LOW4
    x = (x * _U64(10) + (x >> _U64(8))) & _U64(0x00FF00FF00FF00FF)
    x = (x * _U64(100) + (x >> _U64(16))) & _U64(0x0000FFFF0000FFFF)
    return (x * _U64(10000) + (x >> _U64(32))) & _U64(0xFFFFFFFF)


def _hex8(x, alpha):
    """The value of the 8 hexadecimal digits of each word (the first character most significant)."""
    x = (x & _LOW4) + (alpha >> _U64(7)) * _U64(9)
    x = ((x << _U64(4)) | (x >> _U64(8))) & _U64(0x00FF00FF00FF00FF)
    x = ((x << _U64(8)) | (x >> _U64(16))) & _U64(0x0000FFFF0000FFFF)
    return ((x << _U64(16)) | (x >> _U64(32))) & _U64(0xFFFFFFFF)


_SPACE = np.zeros(256, dtype=bool)          # what str.strip() removes, in ASCII
_SPACE[np.frombuffer(b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f", np.uint8)] = True
_TAB, _NL, _CR, _MINUS = 9, 10, 13, 45


@dataclass(frozen=True)
class CriteoChunk:
    """The samples of a block of consecutive lines.

    ``labels`` (n,) float32, ``dense`` (n, 13) float32, ``rows`` (n, tables)
    uint32; ``lines`` counts every line of the block (blank and skipped
    ones too), ``skipped`` the malformed lines dropped and ``problems`` the
    reasons for the first few of them.
    """
    labels: np.ndarray
    dense: np.ndarray
    rows: np.ndarray
    lines: int
    skipped: int = 0
    problems: tuple = ()

    def __len__(self):
        return len(self.labels)


def parse_block(data, tables, *, first_line=1, where="<data>", on_error="raise"):
    """Parse whole lines of Criteo-format bytes into a :class:`CriteoChunk`.

    ``tables`` are the row counts of the tables (the first ``len(tables)``
    categorical columns are mapped). ``first_line`` numbers the block's
    first line in messages (``where:line``). A malformed line raises
    :class:`CriteoFormatError` (``on_error="raise"``) or is dropped and counted
    (``"skip"``).
    """
    a = np.frombuffer(data, dtype=np.uint8)
    n_tables = len(tables)
    newlines = np.flatnonzero(a == _NL)
    starts = np.concatenate([[0], newlines + 1])
    if starts[-1] == len(a):                  # the block ends with a newline: no line after it
        starts = starts[:-1]
    n = len(starts)
    if n == 0:
        return CriteoChunk(np.zeros(0, np.float32), np.zeros((0, N_DENSE), np.float32),
                           np.zeros((0, n_tables), np.uint32), 0)
    ends = np.concatenate([newlines, [len(a)]])[:n]
    # Segments [start, next start) are never empty (each holds at least its newline).
    top = np.maximum.reduceat(a, starts)
    non_ascii = top >= 128
    blank = np.zeros(n, dtype=bool)
    if (top <= 0x20).any():                   # only then can a line be all white space
        blank = np.maximum.reduceat((~_SPACE[a]).view(np.uint8), starts) == 0
    # The exact parser strips every trailing carriage return.
    cr = (ends > starts) & (a[ends - 1] == _CR)
    while cr.any():
        ends = ends - cr
        cr = (ends > starts) & (a[ends - 1] == _CR)
    tabs = np.flatnonzero(a == _TAB)
    w = N_FIELDS - 1
    if (len(tabs) == n * w and (tabs[::w] > starts).all()     # usually: each line its own tabs
            and (tabs[w - 1::w] < ends).all()):
        shaped = ~non_ascii & ~blank
        t = tabs.reshape(n, w)[shaped]
    else:
        tab_line = np.searchsorted(newlines, tabs)
        shaped = (np.bincount(tab_line, minlength=n)[:n] == N_FIELDS - 1) & ~non_ascii & ~blank
        t = tabs[shaped[tab_line]].reshape(-1, w)
    cand = np.flatnonzero(shaped)
    padded = np.concatenate([np.zeros(_PAD, np.uint8), a, np.zeros(8, np.uint8)])

    # Label: exactly "0" or "1".
    first = padded[starts[cand] + _PAD]
    ok = (t[:, 0] - starts[cand] == 1) & ((first == ord("0")) | (first == ord("1")))
    labels = (first == ord("1")).astype(np.float32)

    # Integers: an optional minus, then 1 to 18 digits; or empty.
    s, e = t[:, :N_DENSE] + 1, t[:, 1:N_DENSE + 1]
    neg = (e > s) & (padded[s + _PAD] == _MINUS)
    digits = e - s - neg
    ok &= ((e == s) | ((digits >= 1) & (digits <= INT_DIGITS))).all(axis=1)
    x = _fill(_words(padded, e, 24), _KEEP_INT[np.minimum(digits, 24)])
    ok &= (_in_range(x, 0x30, 0x39) == _HIGH).all(axis=(1, 2))
    v = _decimal8(x)
    value = (v[..., 0] * _U64(10**16) + v[..., 1] * _U64(10**8) + v[..., 2])
    dense = np.log1p(np.where(neg, 0, value).astype(np.float64)).astype(np.float32)

    # Categoricals: 1 to 16 hexadecimal digits; or empty.
    s = t[:, N_DENSE:] + 1
    e = np.concatenate([t[:, N_DENSE + 1:], ends[cand, None]], axis=1)
    ok &= (e - s <= HEX_DIGITS).all(axis=1)
    x = _fill(_words(padded, e, 16), _KEEP_HEX[np.minimum(e - s, 16)])
    alpha = _in_range(x | _rep(0x20), 0x61, 0x66)
    ok &= ((_in_range(x, 0x30, 0x39) | alpha) == _HIGH).all(axis=(1, 2))
    v = _hex8(x, alpha)
    ids = (v[..., 0] << _U64(32)) | v[..., 1]
    rows = (ids[:, :n_tables] % np.asarray(tables, dtype=np.uint64)).astype(np.uint32)

    good = np.zeros(n, dtype=bool)
    good[cand[ok]] = True
    bad = np.flatnonzero(~good & ~blank)
    problems = []
    for j in bad[:1 if on_error == "raise" else KEEP_PROBLEMS]:
        problem = _problem(bytes(a[starts[j]:ends[j]]), f"{where}:{first_line + j}")
        if problem is None:
            raise AssertionError(f"{where}:{first_line + j}: the block parser refused a line "
                                 f"the exact parser accepts")
        if on_error == "raise":
            raise problem
        problems.append(str(problem))
    return CriteoChunk(labels=labels[ok], dense=dense[ok], rows=rows[ok], lines=n,
                       skipped=len(bad), problems=tuple(problems))


def iter_chunks(path, tables, *, on_error="raise", chunk_bytes=1 << 20):
    """The file's samples as :class:`CriteoChunk` blocks of about ``chunk_bytes`` of text.

    Reads the file once, in order, holding one block at a time; line numbers
    in messages count from the start of the file.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
    path = Path(path)
    line, rest = 1, b""
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk_bytes)
            data = rest + block
            if not block:                     # the end: a last line without a newline
                if data:
                    yield parse_block(data, tables, first_line=line, where=str(path),
                                      on_error=on_error)
                return
            cut = data.rfind(b"\n") + 1
            if cut == 0:                      # a line longer than a block: read on
                rest = data
                continue
            data, rest = data[:cut], data[cut:]
            chunk = parse_block(data, tables, first_line=line, where=str(path), on_error=on_error)
            line += chunk.lines
            yield chunk


@dataclass
class CriteoDataset:
    """All samples of a Criteo-format file, hashed into the configuration's tables.

    ``on_error="raise"`` stops at the first malformed line with its number;
    ``"skip"`` drops it and counts it in ``skipped`` (the first few reasons
    are kept in ``problems``). Batch ``i`` takes samples ``i*B .. i*B+B-1``,
    wrapping around the file. The samples are held as ``labels`` (n,)
    float32, ``dense`` (n, 13) float32 and ``rows`` (n, tables) uint32.
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
        chunks = list(iter_chunks(self.path, cfg.tables, on_error=self.on_error))
        self.skipped = sum(c.skipped for c in chunks)
        self.problems = [p for c in chunks for p in c.problems][:KEEP_PROBLEMS]
        if not any(len(c) for c in chunks):
            raise CriteoFormatError(f"{self.path}: no usable lines")
        self.labels = np.concatenate([c.labels for c in chunks])
        self.dense = np.concatenate([c.dense for c in chunks])
        self.rows = np.concatenate([c.rows for c in chunks])

    def __len__(self):
        return len(self.labels)

    def _samples(self, i, take):
        n_bags = len(take) * self.config.n_tables
        return Batch(index=i, indices=self.rows[take].reshape(-1).copy(),
                     offsets=np.arange(n_bags + 1, dtype=np.uint32), batch_size=len(take),
                     n_tables=self.config.n_tables, dense=self.dense[take].copy(),
                     labels=self.labels[take].copy())

    def passes(self, batches):
        """How many times ``batches`` batches read the samples (above 1: the run wraps
        around to the file's first sample, a second epoch)."""
        return batches * self.batch_size / len(self)

    def batch(self, i):
        b, n = self.batch_size, len(self)
        return self._samples(i, (np.arange(b) + i * b) % n)

    def split(self, test_fraction):
        """``(train, test)``: the file's samples in line order, the last ``test_fraction``
        of them held out (the Criteo convention: the test set follows the training set
        in time). Both are datasets of this kind over the same arrays."""
        n = len(self)
        held = round(n * test_fraction)
        if not 0 < test_fraction < 1 or held < 1 or held >= n:
            raise ValueError(f"a test fraction of {test_fraction} of {n} samples leaves "
                             f"{held} for the test set and {n - held} for training; both "
                             f"need at least one")
        return self._view(0, n - held), self._view(n - held, n)

    def _view(self, start, stop):
        out = object.__new__(CriteoDataset)
        out.__dict__.update(self.__dict__)
        out.labels, out.dense, out.rows = (a[start:stop] for a in
                                           (self.labels, self.dense, self.rows))
        return out

    def test_set(self, name=None):
        """Every sample once, in batches of ``batch_size`` (the last may be smaller), as a
        :class:`~trainingcxl.host.model.evaluate.TestSet`."""
        b, n = self.batch_size, len(self)
        return TestSet(name or f"{len(self)} samples of {self.path.name}",
                       lambda i: self._samples(i, np.arange(i * b, min(n, (i + 1) * b))),
                       -(-n // b))


# -- a sample generator ----------------------------------------------------------------

_HEX_CHARS = np.frombuffer(b"0123456789abcdef", np.uint8)


def _decimal(values, width):
    """Non-negative integers as right-aligned ASCII digits in ``width`` bytes, 0 before them."""
    out = np.zeros((*values.shape, width), dtype=np.uint8)
    v = values.astype(np.int64)
    for k in range(width - 1, -1, -1):
        digit = (v % 10).astype(np.uint8)
        out[..., k] = np.where((v > 0) | (k == width - 1), digit + ord("0"), 0)
        v //= 10
    return out


def write_sample(path, lines=2000, seed=0, *, missing=0.05, signal=2.5, block=1 << 16):
    """Write a Criteo-format file with a learnable signal; a pure function of the arguments.

    Each categorical column draws from its own vocabulary of random 32-bit
    ids with Zipf popularity; each id and each dense column has a hidden
    weight, and the label is drawn from the sigmoid of their sum. Column
    ``C{k+1}``'s weights shrink as ``0.6**k``, so a configuration that uses
    only the first few columns still sees most of the signal. Values go
    missing with probability ``missing``. Lines are drawn and written
    ``block`` at a time, as arrays of bytes.
    """
    rng = np.random.default_rng([seed, 0xC417E0])
    vocab = [rng.integers(0, 2**32, size=int(rng.integers(20, 300))) for _ in range(N_CAT)]
    weights = [rng.standard_normal(len(v)) for v in vocab]
    dense_w = rng.standard_normal(N_DENSE)
    shifts = np.arange(28, -1, -4, dtype=np.uint64)
    with open(path, "wb") as f:
        for at in range(0, lines, block):
            n = min(block, lines - at)
            logit = np.zeros(n)
            ids = np.empty((n, N_CAT), dtype=np.uint64)
            for k in range(N_CAT):
                r = np.minimum(rng.zipf(1.3, size=n) - 1, len(vocab[k]) - 1)
                logit += weights[k][r] * 0.6 ** k
                ids[:, k] = vocab[k][r]
            ints = rng.geometric(0.05, size=(n, N_DENSE)) - 1
            logit += (np.log1p(ints) - 2.5) @ dense_w / (2 * math.sqrt(N_DENSE))
            labels = rng.random(n) < 1 / (1 + np.exp(-signal * logit))
            miss_dense = rng.random((n, N_DENSE)) < missing
            miss_cat = rng.random((n, N_CAT)) < missing
            # Fixed-width fields with 0 bytes as padding; dropping the 0s leaves the lines.
            width = len(str(int(ints.max(initial=0))))
            dec = _decimal(ints, width)
            dec[miss_dense] = 0
            hexa = _HEX_CHARS[(ids[..., None] >> shifts) & np.uint64(15)]
            hexa[miss_cat] = 0
            tab = np.full((n, 1), _TAB, np.uint8)
            parts = [(ord("0") + labels).astype(np.uint8)[:, None]]
            for k in range(N_DENSE):
                parts += [tab, dec[:, k]]
            for k in range(N_CAT):
                parts += [tab, hexa[:, k]]
            parts.append(np.full((n, 1), _NL, np.uint8))
            text = np.concatenate(parts, axis=1).reshape(-1)
            f.write(text[text != 0].tobytes())
    return Path(path)

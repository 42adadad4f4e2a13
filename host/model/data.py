"""Synthetic DLRM batches with Zipf-like row popularity, and initial tables."""

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from trainingcxl.host.model.evaluate import TestSet
from trainingcxl.host.model.fixed import to_fixed

__all__ = ["Batch", "SyntheticWorkload", "initial_tables", "ZIPF_ALPHA"]

#: Zipf exponent of synthetic rows' popularity (heavy-tailed, as in Criteo).
ZIPF_ALPHA = 1.05


@dataclass(frozen=True)
class Batch:
    """One batch in the device's CSR form.

    ``offsets`` has ``n_bags + 1`` entries; bag ``k = sample * n_tables + table``
    owns ``indices[offsets[k]:offsets[k+1]]``, row numbers of that table.
    """
    index: int
    indices: np.ndarray          # uint32
    offsets: np.ndarray          # uint32
    batch_size: int
    n_tables: int
    dense: np.ndarray | None = None      # (batch_size, dense_features) float32
    labels: np.ndarray | None = None     # (batch_size,) float32, 0 or 1

    @property
    def n_bags(self):
        return len(self.offsets) - 1

    @property
    def n_indices(self):
        return len(self.indices)


@dataclass(frozen=True)
class SyntheticWorkload:
    """Batches as a pure function of ``(seed, i)``.

    Pooling factors are uniform in ``[min_pooling, max_pooling]``. Row ``r`` of
    a table is drawn with probability proportional to ``1 / rank(r) **
    zipf_alpha``, where the rank order is a fixed random permutation of the
    table (so hot rows are spread over the table, as after hashing).

    Labels carry a learnable signal: a hidden teacher gives every row a weight
    and every dense feature a weight (all standard normal, fixed by ``seed``);
    a sample's logit is ``signal * (sum over tables of the mean row weight of
    its bag / sqrt(tables) + dense . weights / sqrt(features))`` and its label
    is drawn from the sigmoid of that. Dense features are standard normal.
    """
    config: object
    seed: int = 0
    batch_size: int = 16
    min_pooling: int = 0
    max_pooling: int | None = None
    zipf_alpha: float = ZIPF_ALPHA
    signal: float = 3.0
    #: Which stream of batches (0: training); another stream draws other samples from
    #: the same distribution and teacher (a held-out test set, :meth:`test_set`).
    stream: int = 0

    def __post_init__(self):
        hi = self.config.max_pooling if self.max_pooling is None else self.max_pooling
        if not 0 <= self.min_pooling <= hi <= self.config.max_pooling:
            raise ValueError(f"pooling range [{self.min_pooling}, {hi}] must lie in "
                             f"[0, {self.config.max_pooling}]")
        if self.batch_size * self.config.n_tables > self.config.max_bags:
            raise ValueError(f"batch_size {self.batch_size} x {self.config.n_tables} tables "
                             f"exceeds max_bags {self.config.max_bags}")

    @property
    def pooling_range(self):
        hi = self.config.max_pooling if self.max_pooling is None else self.max_pooling
        return self.min_pooling, hi

    @cached_property
    def _popularity(self):
        out = []
        for t, rows in enumerate(self.config.tables):
            rng = np.random.default_rng([self.seed, 0x7AB1E, t])
            weights = 1.0 / np.arange(1, rows + 1) ** self.zipf_alpha
            cdf = np.cumsum(weights)
            out.append((cdf / cdf[-1], rng.permutation(rows)))
        return out

    @cached_property
    def _teacher(self):
        rng = np.random.default_rng([self.seed, 0x7EAC4])
        rows = [rng.standard_normal(r) for r in self.config.tables]
        return rows, rng.standard_normal(self.config.model.dense_features)

    def _key(self, what, i):
        # Stream 0 keeps the key it always had: training batches stay as they were.
        return [self.seed, what, i] + ([self.stream] if self.stream else [])

    def test_set(self, samples, stream=1):
        """``samples`` held-out samples (rounded up to whole batches) from another stream
        of this workload, as a :class:`~trainingcxl.host.model.evaluate.TestSet`."""
        if samples < 1:
            raise ValueError(f"a test set needs at least one sample, not {samples}")
        held = replace(self, stream=stream)
        n = -(-samples // self.batch_size)
        return TestSet(f"{n * self.batch_size} synthetic samples, stream {stream}", held.batch, n)

    def batch(self, i):
        rng = np.random.default_rng(self._key(0xBA7C4, i))
        n_tables = self.config.n_tables
        n_bags = self.batch_size * n_tables
        lo, hi = self.pooling_range
        lengths = rng.integers(lo, hi + 1, size=n_bags)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint32)
        indices = np.empty(int(offsets[-1]), dtype=np.uint32)
        # One draw a row, in bag order, then each table's rows at once.
        u = rng.random(len(indices))
        table_of = np.repeat(np.arange(n_bags) % n_tables, lengths)
        for t, (cdf, perm) in enumerate(self._popularity):
            sel = table_of == t
            ranks = np.searchsorted(cdf, u[sel], side="right")
            indices[sel] = perm[np.minimum(ranks, len(perm) - 1)]
        dense, labels = self._dense_and_labels(i, indices, offsets)
        return Batch(index=i, indices=indices, offsets=offsets, batch_size=self.batch_size,
                     n_tables=n_tables, dense=dense, labels=labels)

    def _dense_and_labels(self, i, indices, offsets):
        # A separate stream, so indices do not depend on the model shape.
        rng = np.random.default_rng(self._key(0xDE45E, i))
        cfg = self.config
        n_tables, b = cfg.n_tables, self.batch_size
        dense = rng.standard_normal((b, cfg.model.dense_features)).astype(np.float32)
        row_w, dense_w = self._teacher
        lengths = np.diff(offsets.astype(np.int64))
        bag_of = np.repeat(np.arange(b * n_tables), lengths)
        w = np.empty(len(indices))
        for t in range(n_tables):
            sel = bag_of % n_tables == t
            w[sel] = row_w[t][indices[sel]]
        sums = np.bincount(bag_of, weights=w, minlength=b * n_tables)     # in order, as a loop
        means = (sums / np.maximum(lengths, 1)).reshape(b, n_tables)
        logit = self.signal * (means.sum(axis=1) / np.sqrt(n_tables)
                               + dense @ dense_w / np.sqrt(len(dense_w)))
        labels = (rng.random(b) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        return dense, labels


def initial_tables(config, seed, scale=0.05, *, only=None, ranges=None):
    """Tables of uniform values in ``[-scale, scale)``, in fixed point; a pure function of
    ``seed``. ``only``: the numbers of the tables wanted (a pool device's, ascending),
    each the same as among all; the others are skipped, not made. ``ranges``: with
    ``only``, the rows ``(first, end)`` wanted of each (a pool device's pieces)."""
    rng = np.random.default_rng([seed, 0x7AB1E5])
    wanted = {}
    for k, t in enumerate(range(config.n_tables) if only is None else only):
        wanted.setdefault(t, []).append((0, config.tables[t]) if ranges is None else
                                        tuple(ranges[k]))
    out = []
    for t, rows in enumerate(config.tables):
        at = 0
        for lo, hi in wanted.get(t, ()):
            # One 64-bit draw a value: the rows not wanted are skipped, not made.
            rng.bit_generator.advance((lo - at) * config.dim)
            out.append(to_fixed(rng.uniform(-scale, scale, size=(hi - lo, config.dim)),
                                config.fixed.frac_bits))
            at = hi
        rng.bit_generator.advance((rows - at) * config.dim)
    return out

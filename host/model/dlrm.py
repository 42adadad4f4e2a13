"""DLRM golden model: the dense part in floating point, the embeddings in the device's fixed point.

The model (Naumov et al., "Deep Learning Recommendation Model", 2019): dense
features go through the bottom MLP (ReLU after every layer) to a vector of
``dim`` elements; with the ``tables`` pooled embeddings it forms ``tables + 1``
vectors whose pairwise dot products (each pair once), appended to the bottom
output, feed the top MLP (ReLU after hidden layers) that ends in one logit;
sigmoid and binary cross-entropy (mean over the batch) give the loss; every
parameter takes a plain SGD step.

Embedding gradients. The GPU computes the loss gradient of every pooled
vector in floating point; it multiplies it by the learning rate and rounds it
to the device's fixed point *before* handing it to the device (one delta per
bag, :func:`embedding_deltas`). The device then subtracts the bag's delta from
every row of the bag (:func:`trainingcxl.host.model.golden.embedding_update`).
Scaling on the GPU keeps a multiplier array and a second rounding out of the
device, and makes the update pure integer subtraction, which is associative:
the relaxed lookup can correct a pooled vector by exactly the amount the
update changed its rows.
"""

from dataclasses import dataclass

import numpy as np

from trainingcxl.host.model.fixed import from_fixed, to_fixed
from trainingcxl.host.model.golden import embedding_bag_sum, embedding_update

__all__ = ["DenseModel", "float_bag_sum", "float_subtract", "embedding_deltas", "StepResult", "FixedPointTrainer", "FloatTrainer", "Gpu"]


def _relu(x):
    return np.maximum(x, 0)


class DenseModel:
    """Bottom MLP, dot-product interaction and top MLP, with forward, backward and SGD.

    Parameters are initialised as in the DLRM reference code: weights normal
    with standard deviation ``sqrt(2 / (fan_in + fan_out))``, biases normal with
    ``sqrt(1 / fan_out)``; a pure function of ``seed``.
    """

    def __init__(self, config, seed=0, dtype=np.float32):
        self.config = config
        self.dtype = np.dtype(dtype)
        shape = config.model
        n_vec = config.model_tables + 1
        self.n_pairs = n_vec * (n_vec - 1) // 2
        self._iu = np.triu_indices(n_vec, k=1)
        bottom = (shape.dense_features, *shape.bottom_hidden, config.dim)
        top = (config.dim + self.n_pairs, *shape.top_hidden, 1)
        rng = np.random.default_rng([seed, 0xD1A])
        self.bottom = [self._layer(rng, i, o) for i, o in zip(bottom, bottom[1:])]
        self.top = [self._layer(rng, i, o) for i, o in zip(top, top[1:])]

    def _layer(self, rng, fan_in, fan_out):
        w = rng.normal(0, np.sqrt(2 / (fan_in + fan_out)), size=(fan_out, fan_in))
        b = rng.normal(0, np.sqrt(1 / fan_out), size=fan_out)
        return [w.astype(self.dtype), b.astype(self.dtype)]

    @property
    def layers(self):
        return self.bottom + self.top

    def parameters(self):
        """All parameters as one flat vector (the MLP snapshot's contents)."""
        return np.concatenate([p.ravel() for layer in self.layers for p in layer])

    def load_parameters(self, flat):
        flat = np.asarray(flat, dtype=self.dtype)
        want = sum(p.size for layer in self.layers for p in layer)
        if flat.shape != (want,):
            raise ValueError(f"expected {want} parameters, got {flat.size}")
        at = 0
        for layer in self.layers:
            for k, p in enumerate(layer):
                layer[k] = flat[at:at + p.size].reshape(p.shape).copy()
                at += p.size

    # -- forward and backward -----------------------------------------------------

    def forward(self, dense, pooled):
        """``dense`` (B, features), ``pooled`` (B, tables, dim) -> logits (B,) and a cache."""
        x = np.asarray(dense, dtype=self.dtype)
        acts = [x]
        for w, b in self.bottom:
            x = _relu(x @ w.T + b)
            acts.append(x)
        z = np.concatenate([x[:, None, :], np.asarray(pooled, dtype=self.dtype)], axis=1)
        dots = np.einsum("bid,bjd->bij", z, z)[:, self._iu[0], self._iu[1]]
        h = np.concatenate([x, dots], axis=1)
        top_acts = [h]
        for k, (w, b) in enumerate(self.top):
            h = h @ w.T + b
            if k < len(self.top) - 1:
                h = _relu(h)
            top_acts.append(h)
        return h[:, 0], (acts, z, top_acts)

    @staticmethod
    def loss(logits, labels):
        """Mean binary cross-entropy of ``sigmoid(logits)`` against ``labels``."""
        z = logits.astype(np.float64)
        y = np.asarray(labels, dtype=np.float64)
        return float(np.mean(np.logaddexp(0, z) - y * z))

    def backward(self, cache, logits, labels):
        """Gradients of the mean loss: ``(layer gradients, d_pooled (B, tables, dim))``."""
        acts, z, top_acts = cache
        n = len(logits)
        p = 1 / (1 + np.exp(-logits.astype(np.float64)))
        g = ((p - np.asarray(labels, dtype=np.float64)) / n).astype(self.dtype)[:, None]
        grads_top = []
        for k in reversed(range(len(self.top))):
            w, _ = self.top[k]
            if k < len(self.top) - 1:
                g = g * (top_acts[k + 1] > 0)
            grads_top.append((g.T @ top_acts[k], g.sum(axis=0)))
            g = g @ w
        grads_top.reverse()
        d_bot = g[:, :self.config.dim]
        pair = np.zeros((n, z.shape[1], z.shape[1]), dtype=self.dtype)
        pair[:, self._iu[0], self._iu[1]] = g[:, self.config.dim:]
        dz = np.einsum("bij,bjd->bid", pair + pair.transpose(0, 2, 1), z)
        d_pooled = dz[:, 1:, :]
        g = d_bot + dz[:, 0, :]
        grads_bottom = []
        for k in reversed(range(len(self.bottom))):
            w, _ = self.bottom[k]
            g = g * (acts[k + 1] > 0)
            grads_bottom.append((g.T @ acts[k], g.sum(axis=0)))
            g = g @ w
        grads_bottom.reverse()
        return grads_bottom + grads_top, d_pooled

    def train(self, batch, pooled, lr):
        """One step on ``batch`` with the pooled vectors ``pooled`` (batch, tables, dim):
        forward, loss, backward and SGD; returns the loss and the pooled vectors'
        gradients."""
        logits, cache = self.forward(batch.dense, pooled)
        loss = self.loss(logits, batch.labels)
        grads, d_pooled = self.backward(cache, logits, batch.labels)
        self.sgd(grads, lr)
        return loss, d_pooled

    def sgd(self, grads, lr):
        lr = self.dtype.type(lr)
        for layer, (gw, gb) in zip(self.layers, grads):
            layer[0] = (layer[0] - lr * gw).astype(self.dtype)
            layer[1] = (layer[1] - lr * gb).astype(self.dtype)


def _table_rows(config, indices, offsets):
    """Per table, the bag and the row of each of its indices (bag ``k`` is of table
    ``k % n_tables``)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    bag_of = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    table_of = bag_of % config.n_tables
    idx = np.asarray(indices, dtype=np.int64)
    return [(bag_of[sel], idx[sel]) for sel in (table_of == t for t in range(config.n_tables))]


def _in_order(starts, counts, vals, acc, sign):
    """``acc[k] += sign * vals[starts[k] + j]`` for ``j`` in ``range(counts[k])``, one ``j``
    after the other, every ``k`` at once: float32 sums in the order a loop would add
    (numpy's reductions may sum pairwise)."""
    by_count = np.argsort(-counts, kind="stable")
    starts, counts = starts[by_count], counts[by_count]
    out = acc[by_count]
    live = len(counts)
    for j in range(int(counts[0]) if len(counts) else 0):
        while counts[live - 1] <= j:
            live -= 1
        if sign > 0:
            out[:live] += vals[starts[:live] + j]
        else:
            out[:live] -= vals[starts[:live] + j]
    acc[by_count] = out
    return acc


def float_bag_sum(config, tables, indices, offsets, *, by_table=None):
    """EmbeddingBag(mode="sum") of float32 ``tables`` in the device's bag order (bag ``k``
    of table ``k % n_tables``), accumulated row by row in float32, in the bag's order:
    the float32 reference's pooling. ``by_table``: :func:`_table_rows` of the batch, if
    at hand."""
    by_table = by_table or _table_rows(config, indices, offsets)
    offsets = np.asarray(offsets, dtype=np.int64)
    vals = np.empty((int(offsets[-1]), config.dim), dtype=np.float32)
    bag_of = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    for t, (table, (_, rows)) in enumerate(zip(tables, by_table)):
        vals[bag_of % config.n_tables == t] = table[rows]
    pooled = np.zeros((len(offsets) - 1, config.dim), dtype=np.float32)
    return _in_order(offsets[:-1], np.diff(offsets), vals, pooled, +1)


def float_subtract(table, rows, values):
    """``table[rows[i]] -= values[i]`` for each ``i`` in order, in float32: what
    ``np.subtract.at`` does, a row's contributions one after the other."""
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    first = np.flatnonzero(np.diff(sorted_rows, prepend=-1) != 0)
    counts = np.diff(np.append(first, len(rows)))
    distinct = sorted_rows[first]
    table[distinct] = _in_order(first, counts, values[order], table[distinct], -1)


def embedding_deltas(config, d_pooled):
    """What the GPU hands the device: ``lr * d_pooled`` per bag, rounded to fixed point.

    ``d_pooled`` is (batch, tables, dim); the result is (batch * tables, dim)
    int32 in bag order (bag ``k = sample * tables + table``).
    """
    scaled = np.float64(config.model.lr) * np.asarray(d_pooled, dtype=np.float64)
    return to_fixed(scaled.reshape(-1, config.dim), config.fixed.frac_bits)


@dataclass
class StepResult:
    loss: float
    pooled: np.ndarray           # what the lookup produced (int32 for the device path)
    deltas: np.ndarray | None    # what the update consumes (int32), fixed-point path only


def _own_tables(own, d_pooled):
    """The gradients (batch, model tables, dim) of the tables ``own`` (a pool device's,
    the model's table numbers), or all of them (``None``)."""
    return d_pooled if own is None else d_pooled[:, list(own), :]


class _Trainer:
    """What the golden model and the float32 reference share: tables (converted by
    :meth:`_table`), the MLPs, and the step of the MLPs.

    ``own``: on a device of a pool, the numbers of the model's tables it holds; the
    trainer then holds those tables and the whole MLP, and its step takes the pooled
    vectors of every table (``model_inputs``, gathered from the pool's devices)."""

    def __init__(self, config, tables, seed=0, own=None):
        self.config, self.own = config, own
        self.tables = [self._table(t) for t in tables]
        self.dense = DenseModel(config, seed)

    def _mlp_step(self, batch, x, model_inputs):
        """The MLPs' step on this trainer's pooled vectors ``x`` (or the model's); returns
        the loss and the gradients of this trainer's tables' pooled vectors."""
        loss, d_pooled = self.dense.train(batch, x if model_inputs is None else model_inputs,
                                          self.config.model.lr)
        return loss, _own_tables(self.own, d_pooled)


class FixedPointTrainer(_Trainer):
    """The golden model of a training run on the device: fixed-point embeddings, float32
    MLPs (``own`` as for :class:`_Trainer`)."""

    @staticmethod
    def _table(t):
        return np.asarray(t, dtype=np.int32).copy()

    def inputs(self, batch):
        """The pooled vectors of this trainer's tables: fixed point (bags, dim), and as the
        MLPs take them, float32 (batch, tables, dim)."""
        cfg = self.config
        pooled = embedding_bag_sum(cfg, self.tables, batch.indices, batch.offsets).pooled
        x = from_fixed(pooled, cfg.fixed.frac_bits).astype(np.float32)
        return pooled, x.reshape(batch.batch_size, cfg.n_tables, cfg.dim)

    def step(self, batch, inputs=None, model_inputs=None):
        cfg = self.config
        pooled, x = inputs or self.inputs(batch)
        loss, d_pooled = self._mlp_step(batch, x, model_inputs)
        deltas = embedding_deltas(cfg, d_pooled)
        embedding_update(cfg, self.tables, batch.indices, batch.offsets, deltas, inplace=True)
        return StepResult(loss=loss, pooled=pooled, deltas=deltas)


class FloatTrainer(_Trainer):
    """The float32 reference: the same model and data with embeddings in float32
    (``own`` as for :class:`_Trainer`)."""

    def _table(self, t):
        return from_fixed(t, self.config.fixed.frac_bits).astype(np.float32)

    def inputs(self, batch):
        """Each table's rows of the batch, and the pooled vectors of this trainer's tables,
        float32 (batch, tables, dim)."""
        cfg = self.config
        by_table = _table_rows(cfg, batch.indices, batch.offsets)
        pooled = float_bag_sum(cfg, self.tables, batch.indices, batch.offsets, by_table=by_table)
        return by_table, pooled.reshape(batch.batch_size, cfg.n_tables, cfg.dim)

    def step(self, batch, inputs=None, model_inputs=None):
        cfg = self.config
        by_table, x = inputs or self.inputs(batch)
        loss, d_pooled = self._mlp_step(batch, x, model_inputs)
        step = np.float32(cfg.model.lr) * d_pooled.reshape(batch.n_bags, cfg.dim)
        for table, (bags, rows) in zip(self.tables, by_table):
            if len(rows):
                float_subtract(table, rows, step[bags])
        return StepResult(loss=loss, pooled=x.reshape(batch.n_bags, cfg.dim), deltas=None)


class Gpu:
    """The GPU: runs the dense model on the pooled vectors the device produced (``own``
    as for :class:`FixedPointTrainer`: on a pool, ``model_inputs`` are every device's)."""

    def __init__(self, cfg, model, own=None):
        self.cfg, self.own = cfg, own
        self.model = model

    def inputs(self, batch, pooled):
        """The device's pooled vectors (fixed point, bags x dim) as the MLPs take them."""
        cfg = self.cfg
        x = from_fixed(pooled, cfg.fixed.frac_bits).astype(np.float32)
        return x.reshape(batch.batch_size, cfg.n_tables, cfg.dim)

    def step(self, batch, pooled, model_inputs=None):
        cfg = self.cfg
        x = self.inputs(batch, pooled) if model_inputs is None else model_inputs
        loss, d_pooled = self.model.train(batch, x, cfg.model.lr)
        return loss, embedding_deltas(cfg, _own_tables(self.own, d_pooled))

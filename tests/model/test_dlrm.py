"""DLRM golden model: gradients, the embedding update, and that training learns."""

import numpy as np
import pytest

from trainingcxl.spec.config import Config, ModelShape
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.dlrm import DenseModel, FixedPointTrainer, FloatTrainer, embedding_deltas
from trainingcxl.host.model.golden import embedding_update
from trainingcxl.spec.presets import PRESETS

CFG = Config(tables=(40, 30, 20), max_pooling=4, max_bags=512,
             model=ModelShape(dense_features=5, bottom_hidden=(8,), top_hidden=(6,), lr=0.1))


def test_backward_matches_finite_differences():
    model = DenseModel(CFG, seed=3, dtype=np.float64)
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((4, 5))
    pooled = rng.standard_normal((4, 3, 16)) * 0.3
    labels = np.array([0, 1, 1, 0], dtype=np.float64)

    def loss_of(p=pooled):
        logits, _ = model.forward(dense, p)
        return model.loss(logits, labels)

    logits, cache = model.forward(dense, pooled)
    grads, d_pooled = model.backward(cache, logits, labels)
    eps = 1e-6
    for (b, t, d) in [(0, 0, 0), (1, 2, 5), (3, 1, 15)]:
        p = pooled.copy()
        p[b, t, d] += eps
        up = loss_of(p)
        p[b, t, d] -= 2 * eps
        numeric = (up - loss_of(p)) / (2 * eps)
        assert d_pooled[b, t, d] == pytest.approx(numeric, rel=1e-5, abs=1e-9)
    for layer, (gw, gb) in zip(model.layers, grads):
        w = layer[0]
        w[0, 0] += eps
        up = loss_of()
        w[0, 0] -= 2 * eps
        numeric = (up - loss_of()) / (2 * eps)
        w[0, 0] += eps
        assert gw[0, 0] == pytest.approx(numeric, rel=1e-5, abs=1e-9)


def test_parameters_round_trip():
    a, b = DenseModel(CFG, seed=1), DenseModel(CFG, seed=2)
    assert not np.array_equal(a.parameters(), b.parameters())
    b.load_parameters(a.parameters())
    np.testing.assert_array_equal(a.parameters(), b.parameters())
    with pytest.raises(ValueError, match="parameters"):
        b.load_parameters(a.parameters()[:-1])


def test_embedding_update_gives_every_contribution_and_wraps():
    tables = [np.zeros((40, 16), np.int32), np.zeros((30, 16), np.int32),
              np.full((20, 16), -2**31 + 1, np.int32)]
    # Row 5 of table 0 appears twice in bag 0 and once in bag 3; bag 2 wraps.
    indices = np.array([5, 5, 1, 0, 5], np.uint32)
    offsets = np.array([0, 2, 3, 4, 5], np.uint32)
    deltas = np.arange(4 * 16, dtype=np.int32).reshape(4, 16) + 1
    out = embedding_update(CFG, tables, indices, offsets, deltas)
    np.testing.assert_array_equal(out[0][5], -(2 * deltas[0] + deltas[3]))
    np.testing.assert_array_equal(out[1][1], -deltas[1])
    assert out[2][0, 0] == np.int32(2**31 - 1 - deltas[2, 0] + 2)   # wrapped past -2**31
    assert (tables[0] == 0).all()                                     # inputs untouched


def test_deltas_are_lr_scaled_and_rounded():
    d = np.full((2, 3, 16), 0.5, np.float32)
    deltas = embedding_deltas(CFG, d)
    assert deltas.shape == (6, 16) and (deltas == round(0.1 * 0.5 * 2**16)).all()


def test_training_learns_and_fixed_point_tracks_float32():
    tables = initial_tables(CFG, seed=1)
    wl = SyntheticWorkload(CFG, seed=1, batch_size=64, max_pooling=4)
    fixed, ref = FixedPointTrainer(CFG, tables, seed=1), FloatTrainer(CFG, tables, seed=1)
    lf, lr = [], []
    for i in range(80):
        b = wl.batch(i)
        lf.append(fixed.step(b).loss)
        lr.append(ref.step(b).loss)
    assert np.mean(lf[-10:]) < 0.9 * np.mean(lf[:10])
    assert abs(np.mean(lf[-10:]) - np.mean(lr[-10:])) <= 0.02 * np.mean(lr[-10:])


def test_float_pooling_and_update_add_in_order_as_a_loop_would():
    """The float32 reference's vectorised pooling and update are bit-identical to adding
    each row one after the other (``np.add.at``, ``np.subtract.at``), hot rows included."""
    from trainingcxl.host.model.dlrm import _table_rows, float_bag_sum, float_subtract
    rng = np.random.default_rng(1)
    cfg = PRESETS["small"]
    tables = [rng.standard_normal((n, cfg.dim)).astype(np.float32) * 30 for n in cfg.tables]
    n_bags = 64 * cfg.n_tables
    lengths = rng.integers(0, 40, n_bags)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    bag_of = np.repeat(np.arange(n_bags), lengths)
    hot = rng.random(len(bag_of)) < 0.5
    idx = np.where(hot, rng.integers(0, 3, len(bag_of)),
                   rng.integers(0, min(cfg.tables), len(bag_of)))
    by_table = _table_rows(cfg, idx, offsets)
    loop = np.zeros((n_bags, cfg.dim), np.float32)
    for table, (bags, rows) in zip(tables, by_table):
        np.add.at(loop, bags, table[rows])
    assert np.array_equal(float_bag_sum(cfg, tables, idx, offsets).view(np.uint32),
                          loop.view(np.uint32))
    step = rng.standard_normal((n_bags, cfg.dim)).astype(np.float32)
    for table, (bags, rows) in zip(tables, by_table):
        a, b = table.copy(), table.copy()
        np.subtract.at(a, rows, step[bags])
        float_subtract(b, rows, step[bags])
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))

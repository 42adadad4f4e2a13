"""Held-out evaluation: ROC AUC, log loss and accuracy, test sets, and that training learns."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainingcxl.spec.config import Config, ModelShape
from trainingcxl.host.model.criteo import CriteoDataset, write_sample
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.dlrm import FixedPointTrainer, FloatTrainer
from trainingcxl.host.model.evaluate import (OneClassError, evaluate, metrics, predict,
                                             roc_auc)

CFG = Config(tables=(40, 30, 20), max_pooling=4, max_bags=512,
             model=ModelShape(dense_features=5, bottom_hidden=(8,), top_hidden=(6,), lr=0.1))
CRITEO = Config(tables=(97, 50, 211, 13), max_pooling=1, max_bags=512,
                model=ModelShape(dense_features=13, bottom_hidden=(16,), top_hidden=(16,), lr=0.1))


def pairwise_auc(labels, scores):
    """The definition: over every (positive, negative) pair, 1 if the positive scores
    higher, 1/2 for a tie."""
    pos = [s for y, s in zip(labels, scores) if y]
    neg = [s for y, s in zip(labels, scores) if not y]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(-3, 3)), min_size=2, max_size=40))
def test_auc_is_the_pairwise_definition_with_ties(samples):
    labels = [y for y, _ in samples]
    scores = [s for _, s in samples]
    if all(labels) or not any(labels):
        with pytest.raises(OneClassError, match="all (positive|negative)"):
            roc_auc(labels, scores)
        return
    assert roc_auc(labels, scores) == pytest.approx(pairwise_auc(labels, scores), abs=1e-12)


def test_metrics_of_known_predictions():
    labels = np.array([1, 0, 1, 0, 1])
    logits = np.array([2.0, -1.0, -0.5, 0.5, 3.0])
    m = metrics(labels, logits)
    assert m.samples == 5 and m.positives == 3
    assert m.accuracy == pytest.approx(3 / 5)            # 2.0, -1.0 and 3.0 are right
    assert m.auc == pytest.approx(pairwise_auc(labels, logits))
    want = np.mean([np.log1p(np.exp(-z)) if y else np.log1p(np.exp(z))
                    for y, z in zip(labels, logits)])
    assert m.log_loss == pytest.approx(want, rel=1e-12)


def test_one_class_test_set_gives_a_message_not_nan():
    m = metrics(np.zeros(8), np.linspace(-1, 1, 8))
    assert m.auc is None and "all negative" in m.note and "both labels" in m.note
    assert np.isfinite(m.log_loss) and m.accuracy == pytest.approx(0.5)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_a_diverged_model_has_no_auc():
    """Ranks would give NaN predictions a finite AUC; the metrics say what happened."""
    m = metrics(np.array([1, 0, 1, 0]), np.array([2.0, np.nan, 1.0, -1.0]))
    assert m.auc is None and "1 of 4 predictions are not finite" in m.note


def test_predict_matches_what_the_trainers_compute():
    """The device's pooling for fixed-point tables, the reference's for float ones: the
    logits give exactly the loss each trainer reports for the batch."""
    wl = SyntheticWorkload(CFG, seed=2, batch_size=16, min_pooling=1)
    tables = initial_tables(CFG, seed=2)
    for trainer in (FixedPointTrainer(CFG, tables, seed=2), FloatTrainer(CFG, tables, seed=2)):
        for i in range(3):
            batch = wl.batch(i)
            logits = predict(CFG, trainer.tables, trainer.dense, batch)
            assert trainer.step(batch).loss == trainer.dense.loss(logits, batch.labels)


def test_synthetic_test_stream_draws_other_samples():
    wl = SyntheticWorkload(CFG, seed=4, batch_size=16, min_pooling=1)
    test = wl.test_set(40)
    assert test.samples == 48 and test.n_batches == 3      # whole batches
    held = list(test.batches())
    for i in range(3):
        train = wl.batch(i)
        assert not np.array_equal(train.indices, held[i].indices)
        assert not np.array_equal(train.dense, held[i].dense)
    # (That stream 0 still draws the training batches it always drew is pinned by
    # tests/model/test_golden.py::test_synthetic_batches_are_pinned.)
    with pytest.raises(ValueError, match="at least one sample"):
        wl.test_set(0)


def test_training_on_synthetic_data_raises_test_auc_well_above_chance():
    wl = SyntheticWorkload(CFG, seed=0, batch_size=32, min_pooling=1)
    test = wl.test_set(2048)
    tables = initial_tables(CFG, seed=0)
    fixed, ref = FixedPointTrainer(CFG, tables, seed=0), FloatTrainer(CFG, tables, seed=0)
    before = evaluate(CFG, fixed.tables, fixed.dense, test)
    for i in range(300):
        fixed.step(wl.batch(i))
        ref.step(wl.batch(i))
    after = evaluate(CFG, fixed.tables, fixed.dense, test)
    after_ref = evaluate(CFG, ref.tables, ref.dense, test)
    assert after.auc > 0.75 and after.auc > before.auc + 0.1
    assert after.log_loss < before.log_loss
    # The device's fixed point and the float32 reference learn the same model.
    assert abs(after.auc - after_ref.auc) < 0.005
    assert abs(after.log_loss - after_ref.log_loss) < 0.005


def test_criteo_split_holds_out_the_end_of_the_file(tmp_path):
    path = write_sample(tmp_path / "s.tsv", lines=1000, seed=1)
    ds = CriteoDataset(CRITEO, path, batch_size=64)
    train, test = ds.split(0.2)
    assert (len(train), len(test)) == (800, 200)
    assert np.array_equal(test.labels, ds.labels[800:])
    assert np.array_equal(train.rows, ds.rows[:800])
    held = test.test_set()
    assert held.samples == 200 and held.n_batches == 4     # 64, 64, 64 and 8
    got = np.concatenate([b.labels for b in held.batches()])
    assert np.array_equal(got, ds.labels[800:])
    # Training batches wrap around the training part only.
    assert np.array_equal(train.batch(12).labels, ds.labels[np.arange(768, 832) % 800])
    for bad in (0, 1, 0.0001, 1.5):
        with pytest.raises(ValueError, match="test fraction"):
            ds.split(bad)


def test_training_on_criteo_sample_raises_test_auc(tmp_path):
    path = write_sample(tmp_path / "s.tsv", lines=6000, seed=1)
    train, test = CriteoDataset(CRITEO, path, batch_size=100).split(0.2)
    held = test.test_set()
    held.check_labels()
    tables = initial_tables(CRITEO, seed=0)
    fixed = FixedPointTrainer(CRITEO, tables, seed=0)
    before = evaluate(CRITEO, fixed.tables, fixed.dense, held)
    for i in range(150):
        fixed.step(train.batch(i))
    after = evaluate(CRITEO, fixed.tables, fixed.dense, held)
    assert after.auc > 0.6 and after.auc > before.auc + 0.05

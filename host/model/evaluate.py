"""Held-out evaluation of a trained DLRM: log loss, ROC AUC and accuracy on a test set.

Evaluation runs on the host model, a batch at a time and vectorised: the
device is not involved beyond giving its tables back. A model is given as its
tables and its dense part (:class:`~.dlrm.DenseModel`): the device-trained
model is the device's tables (int32, the device's fixed point) with the GPU's
MLPs; the float32 reference is its float tables with its own MLPs. Pooling
follows the tables' type: fixed-point tables pool exactly as the device does
(:func:`~.golden.embedding_bag_sum`), float tables as the reference trains
(:func:`~.dlrm.float_bag_sum`).

A test set (:class:`TestSet`) is held out from training: a disjoint seeded
stream of synthetic batches (:meth:`~.data.SyntheticWorkload.test_set`), or
the last part of a Criteo-format file (:meth:`~.criteo.CriteoDataset.split`,
the Criteo convention), or a file of its own.
"""

from dataclasses import asdict, dataclass

import numpy as np

from trainingcxl.host.model.dlrm import DenseModel, float_bag_sum
from trainingcxl.host.model.fixed import from_fixed
from trainingcxl.host.model.golden import embedding_bag_sum

__all__ = ["Metrics", "TestSet", "OneClassError", "roc_auc", "metrics", "predict", "evaluate"]


class OneClassError(ValueError):
    """ROC AUC is undefined: every label of the test set is the same."""


@dataclass(frozen=True)
class Metrics:
    """What a model scores on a test set. ``auc`` is ``None`` (and ``note`` says why)
    when the labels are all of one class."""
    samples: int
    positives: int
    log_loss: float
    auc: float | None
    accuracy: float
    note: str = ""

    def to_dict(self):
        return asdict(self)


class TestSet:
    """Held-out samples, each met once, in batches of the training's form.

    ``make_batch(i)`` gives batch ``i`` of ``n_batches``; ``name`` says where
    the samples come from (for reports).
    """

    def __init__(self, name, make_batch, n_batches):
        if n_batches < 1:
            raise ValueError(f"a test set needs at least one batch ({name})")
        self.name, self._make_batch, self.n_batches = name, make_batch, n_batches
        labels = np.concatenate([b.labels for b in self.batches()])
        self.samples, self.positives = len(labels), int(labels.sum())

    def batches(self):
        for i in range(self.n_batches):
            yield self._make_batch(i)

    def check_labels(self):
        """Raise :class:`OneClassError` if ROC AUC cannot be computed on this set."""
        if self.positives in (0, self.samples):
            raise OneClassError(_one_class(self.name, self.samples, self.positives))

    def __repr__(self):
        return f"TestSet({self.name}: {self.samples} samples, {self.positives} positive)"


def _one_class(name, samples, positives):
    kind = "positive" if positives else "negative"
    return (f"the test set ({name}) has {samples} samples, all {kind}: ROC AUC needs both "
            f"labels; hold out more samples")


def roc_auc(labels, scores):
    """Area under the ROC curve: the probability that a positive sample scores above a
    negative one, ties counting one half (the Mann-Whitney U statistic, from average
    ranks). Raises :class:`OneClassError` when the labels are all of one class."""
    y = np.asarray(labels).astype(bool).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    pos = int(y.sum())
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        raise OneClassError(_one_class("given", len(y), pos))
    order = np.argsort(s, kind="mergesort")
    ranked = s[order]
    # Average rank (1-based) of each run of equal scores.
    starts = np.flatnonzero(np.concatenate([[True], ranked[1:] != ranked[:-1]]))
    ends = np.concatenate([starts[1:], [len(s)]])
    avg = (starts + ends + 1) / 2.0
    ranks = np.empty(len(s))
    ranks[order] = np.repeat(avg, ends - starts)
    u = ranks[y].sum() - pos * (pos + 1) / 2.0
    return float(u / (pos * neg))


def metrics(labels, logits):
    """:class:`Metrics` of predicted ``logits`` against 0/1 ``labels``: mean binary
    cross-entropy of ``sigmoid(logits)`` (as training computes it), ROC AUC, and
    accuracy at probability 0.5 (a logit of 0). A model that diverged (a logit
    that is not finite) has no AUC: ranks would hide it."""
    y = np.asarray(labels, dtype=np.float64).ravel()
    z = np.asarray(logits, dtype=np.float64).ravel()
    if len(y) != len(z) or len(y) == 0:
        raise ValueError(f"{len(y)} labels and {len(z)} predictions")
    log_loss = DenseModel.loss(z, y)
    accuracy = float(np.mean((z >= 0) == (y > 0.5)))
    if not np.isfinite(z).all():
        auc, note = None, (f"{int((~np.isfinite(z)).sum())} of {len(z)} predictions are not "
                           f"finite: the model diverged")
    else:
        try:
            auc, note = roc_auc(y, z), ""
        except OneClassError as e:
            auc, note = None, str(e)
    return Metrics(samples=len(y), positives=int(y.sum()), log_loss=log_loss, auc=auc,
                   accuracy=accuracy, note=note)


def predict(config, tables, dense_model, batch):
    """The model's logits on ``batch``; fixed-point (integer) tables pool as the device
    does, float tables as the float32 reference does."""
    if np.issubdtype(np.asarray(tables[0]).dtype, np.integer):
        pooled = embedding_bag_sum(config, tables, batch.indices, batch.offsets).pooled
        pooled = from_fixed(pooled, config.fixed.frac_bits).astype(np.float32)
    else:
        pooled = float_bag_sum(config, tables, batch.indices, batch.offsets)
    logits, _ = dense_model.forward(batch.dense,
                                    pooled.reshape(batch.batch_size, config.n_tables, config.dim))
    return logits


def evaluate(config, tables, dense_model, test_set):
    """:class:`Metrics` of the model (``tables``, ``dense_model``) on ``test_set``."""
    labels, logits = [], []
    for batch in test_set.batches():
        labels.append(batch.labels)
        logits.append(predict(config, tables, dense_model, batch))
    return metrics(np.concatenate(labels), np.concatenate(logits))

"""A pool device's share of a batch: the bags of the tables it holds.

A batch of the pool's model has bag ``k = sample * T + t`` for table ``t`` of ``T``;
a device holding tables ``S`` (ascending) sees bag ``sample * len(S) + j`` for table
``S[j]``, the same rows in the same order: its batch is a batch of its own
configuration (:mod:`trainingcxl.spec.pool`).
"""

from dataclasses import replace

import numpy as np

__all__ = ["shard_bags", "shard_batch", "model_inputs", "ShardData"]


def shard_bags(batch_size, n_tables, tables):
    """The pool batch's bag numbers of a device's bags, in the device's bag order."""
    return (np.arange(batch_size)[:, None] * n_tables + np.asarray(tables)[None, :]).ravel()


def shard_batch(batch, tables):
    """The device's :class:`~trainingcxl.host.model.data.Batch` of ``batch``."""
    bags = shard_bags(batch.batch_size, batch.n_tables, tables)
    offsets = np.asarray(batch.offsets, dtype=np.int64)
    lengths = np.diff(offsets)[bags]
    starts = offsets[bags]
    new = np.zeros(len(bags) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new[1:])
    take = np.repeat(starts - new[:-1], lengths) + np.arange(new[-1])
    return replace(batch, indices=np.asarray(batch.indices)[take],
                   offsets=new.astype(batch.offsets.dtype), n_tables=len(tables))


def model_inputs(tables, parts):
    """Every table's pooled vectors (batch, model tables, dim) from the devices' ``parts``
    (each batch x its tables x dim), device ``k`` holding the model's tables ``tables[k]``."""
    one = parts[0]
    out = np.empty((one.shape[0], sum(map(len, tables)), one.shape[2]), dtype=one.dtype)
    for held, part in zip(tables, parts):
        out[:, list(held), :] = part
    return out


class ShardData:
    """The pool's workload as one device sees it: ``batch(i)`` of its tables."""

    def __init__(self, data, tables):
        self.data, self.tables = data, tuple(tables)
        self.batch_size = data.batch_size

    def batch(self, i):
        return shard_batch(self.data.batch(i), self.tables)

"""A pool device's share of a batch: the bags of the tables it holds, the rows of its pieces.

A batch of the pool's model has bag ``k = sample * T + t`` for table ``t`` of ``T``;
a device holding pieces of tables ``S`` (ascending, :mod:`trainingcxl.spec.pool`)
sees bag ``sample * len(S) + j`` for piece ``j``: the rows of table ``S[j]``'s bag
that lie in the piece, in the same order, numbered from the piece's first row. Its
batch is a batch of its own configuration. The devices' pooled vectors of a table
add up to the table's (:func:`model_inputs`).
"""

from dataclasses import replace

import numpy as np

from .fixed import wrap32

__all__ = ["shard_bags", "shard_batch", "model_inputs", "ShardData"]


def shard_bags(batch_size, n_tables, tables):
    """The pool batch's bag numbers of a device's bags, in the device's bag order."""
    return (np.arange(batch_size)[:, None] * n_tables + np.asarray(tables)[None, :]).ravel()


def shard_batch(batch, tables, ranges=None):
    """The device's :class:`~trainingcxl.host.model.data.Batch` of ``batch``: the bags of
    ``tables``, with ``ranges`` (a ``(first, end)`` per table) only their rows in it."""
    bags = shard_bags(batch.batch_size, batch.n_tables, tables)
    offsets = np.asarray(batch.offsets, dtype=np.int64)
    lengths = np.diff(offsets)[bags]
    starts = offsets[bags]
    new = np.zeros(len(bags) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new[1:])
    take = np.repeat(starts - new[:-1], lengths) + np.arange(new[-1])
    indices = np.asarray(batch.indices)[take]
    if ranges is not None:
        piece = np.repeat(np.arange(len(bags)) % len(tables), lengths)
        lo, hi = (np.array([r[k] for r in ranges], dtype=np.int64)[piece] for k in (0, 1))
        keep = (indices >= lo) & (indices < hi)
        indices = (indices[keep] - lo[keep]).astype(indices.dtype)
        np.cumsum(np.bincount(np.repeat(np.arange(len(bags)), lengths)[keep],
                              minlength=len(bags)), out=new[1:])
    return replace(batch, indices=indices, offsets=new.astype(batch.offsets.dtype),
                   n_tables=len(tables))


def model_inputs(tables, parts):
    """Every table's pooled vectors (batch, model tables, dim) from the devices' ``parts``
    (each batch x its pieces x dim), device ``k`` holding pieces of the model's tables
    ``tables[k]``. The pieces of a table add up: in fixed point (integer parts),
    wrapping at 32 bits as the device's pooling does, so the sum is the whole table's
    bit for bit; float parts in float32."""
    one = parts[0]
    n = 1 + max(t for held in tables for t in held)
    out = np.zeros((one.shape[0], n, one.shape[2]),
                   dtype=np.int64 if one.dtype.kind == "i" else one.dtype)
    for held, part in zip(tables, parts):
        for j, t in enumerate(held):
            out[:, t, :] += part[:, j, :]
    return wrap32(out) if one.dtype.kind == "i" else out


class ShardData:
    """The pool's workload as one device sees it: ``batch(i)`` of its pieces."""

    def __init__(self, data, tables, ranges=None):
        self.data, self.tables = data, tuple(tables)
        self.ranges = None if ranges is None else tuple(map(tuple, ranges))
        self.batch_size = data.batch_size

    def batch(self, i):
        return shard_batch(self.data.batch(i), self.tables, self.ranges)

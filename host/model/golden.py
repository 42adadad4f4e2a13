"""Golden model of the device's embedding operations, bit-exact with the RTL."""

from dataclasses import dataclass

import numpy as np

from trainingcxl.host.model.fixed import fits32, wrap32

__all__ = ["PoolResult", "embedding_bag_sum", "embedding_update", "check_batch", "coalesce_update",
           "key_deltas", "coalesced_deltas", "batch_keys", "coalesced_layout", "pool_rows",
           "touched_rows"]


@dataclass(frozen=True)
class PoolResult:
    """Pooled vectors ``(n_bags, dim)`` int32 and a per-bag overflow flag."""
    pooled: np.ndarray
    overflow: np.ndarray


def check_batch(config, indices, offsets):
    """Raise ``ValueError`` when a CSR batch breaks a rule the device enforces."""
    indices = np.asarray(indices)
    offsets = np.asarray(offsets, dtype=np.int64)
    n_bags = len(offsets) - 1
    if n_bags < 1 or n_bags > config.max_bags:
        raise ValueError(f"the batch has {n_bags} bags; the device takes 1 to {config.max_bags}")
    if offsets[0] != 0:
        raise ValueError(f"offsets[0] must be 0, not {offsets[0]}")
    lengths = np.diff(offsets)
    if (lengths < 0).any():
        k = int(np.argmax(lengths < 0))
        raise ValueError(f"offsets decrease at bag {k}")
    if offsets[-1] != len(indices):
        raise ValueError(f"offsets end at {offsets[-1]} but there are {len(indices)} indices")
    if lengths.max(initial=0) > config.max_pooling:
        k = int(np.argmax(lengths))
        raise ValueError(f"bag {k} holds {lengths[k]} indices; max_pooling is {config.max_pooling}")
    tables = np.repeat(np.arange(n_bags) % config.n_tables, lengths)
    rows = np.asarray(config.tables)[tables]
    bad = np.nonzero(indices.astype(np.int64) >= rows)[0]
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"index {i} is row {indices[i]} of table {tables[i]}, "
                         f"which has {rows[i]} rows")


def embedding_bag_sum(config, tables, indices, offsets):
    """EmbeddingBag(mode="sum") over the device's bag order and arithmetic.

    Bag ``k`` belongs to table ``k % n_tables`` and sums the rows
    ``indices[offsets[k]:offsets[k+1]]`` of that table. Sums are exact; each
    pooled element is the low 32 bits of the exact sum (two's complement
    wrap) and ``overflow[k]`` flags a bag with an element outside int32.
    """
    check_batch(config, indices, offsets)
    offsets = np.asarray(offsets, dtype=np.int64)
    n_bags = len(offsets) - 1
    lengths = np.diff(offsets)
    table_of = np.repeat(np.arange(n_bags) % config.n_tables, lengths)
    idx = np.asarray(indices, dtype=np.int64)
    # Gather table by table: the work follows the batch, not the tables' size.
    vals = np.empty((len(idx), config.dim), dtype=np.int64)
    for t, table in enumerate(tables):
        sel = table_of == t
        vals[sel] = np.asarray(table)[idx[sel]]
    exact = np.zeros((n_bags, config.dim), dtype=np.int64)
    full = lengths > 0          # a bag's rows are contiguous: sum each non-empty run
    if full.any():
        exact[full] = np.add.reduceat(vals, offsets[:-1][full], axis=0)
    return PoolResult(pooled=wrap32(exact), overflow=~fits32(exact).all(axis=1))


def touched_rows(config, indices, offsets):
    """The distinct rows of every table a CSR batch names, sorted: a list of int64 arrays, one
    per table. One sort over the batch, so the cost follows the batch, not the tables."""
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    table_of = np.repeat(np.arange(len(lengths)) % config.n_tables, lengths)
    keys = np.unique(table_of << 32 | np.asarray(indices, dtype=np.int64))
    bounds = np.searchsorted(keys >> 32, np.arange(config.n_tables + 1))
    return [keys[lo:hi] & 0xFFFFFFFF for lo, hi in zip(bounds, bounds[1:])]


def embedding_update(config, tables, indices, offsets, deltas, *, inplace=False):
    """The device's UPDATE: subtract bag ``k``'s delta from every row of bag ``k``.

    ``deltas`` is (n_bags, dim) int32. A row used by several bags, or several
    times in one bag, receives every contribution. Arithmetic is two's
    complement and wraps, so the result does not depend on the order in which
    contributions are applied. Returns new int32 tables and leaves the inputs
    alone; with ``inplace`` (int32 tables only) it changes ``tables`` and
    returns them, so that a batch costs what it touches, not the tables' size.
    """
    check_batch(config, indices, offsets)
    offsets = np.asarray(offsets, dtype=np.int64)
    n_bags = len(offsets) - 1
    deltas = np.asarray(deltas, dtype=np.int64)
    if deltas.shape != (n_bags, config.dim):
        raise ValueError(f"deltas must be ({n_bags}, {config.dim}), not {deltas.shape}")
    lengths = np.diff(offsets)
    bag_of = np.repeat(np.arange(n_bags), lengths)
    table_of = bag_of % config.n_tables
    idx = np.asarray(indices, dtype=np.int64)
    out = []
    for t, table in enumerate(tables):
        if inplace:
            if not (isinstance(table, np.ndarray) and table.dtype == np.int32):
                raise ValueError(f"an update in place needs int32 tables, not {type(table)}")
        else:
            table = np.array(table, dtype=np.int32) if np.asarray(table).dtype == np.int32 else wrap32(table)
        sel = np.flatnonzero(table_of == t)
        if len(sel):    # sum each row's contributions: sort by row, add up each run
            sel = sel[np.argsort(idx[sel], kind="stable")]
            first = np.flatnonzero(np.diff(idx[sel], prepend=-1) != 0)
            rows = idx[sel][first]
            acc = np.add.reduceat(deltas[bag_of[sel]], first, axis=0)
            table[rows] = wrap32(table[rows].astype(np.int64) - acc)
        out.append(table)
    return out


def batch_keys(config, indices, offsets):
    """Each index's ``(table, row)`` as one key, ``table << 32 | row``, and its bag."""
    offsets = np.asarray(offsets, dtype=np.int64)
    bag_of = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    return (bag_of % config.n_tables) << 32 | np.asarray(indices, dtype=np.int64), bag_of


def coalesced_layout(config, keys):
    """Distinct ``(table, row)`` keys (sorted) in the device's coalesced bag order: bag
    ``s * n_tables + t`` holds the ``s``-th distinct row of table ``t`` (by row number),
    or nothing once table ``t`` has no more. Returns ``(indices, offsets, bags)``: the
    descriptor's arrays and each key's bag."""
    t_n = config.n_tables
    tables = keys >> 32
    rank = np.arange(len(keys)) - np.searchsorted(tables, tables)
    bags = rank * t_n + tables
    n_bags = (int(rank.max()) + 1) * t_n if len(keys) else 0
    counts = np.zeros(n_bags, dtype=np.int64)
    counts[bags] = 1
    rows = np.zeros(n_bags, dtype=np.int64)
    rows[bags] = keys & 0xFFFF_FFFF
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.uint32)
    return rows[counts == 1].astype(np.uint32), offsets, bags


def key_deltas(config, indices, offsets, deltas):
    """A batch's distinct ``(table, row)`` keys (sorted, :func:`batch_keys`) and each one's
    contributions summed (wrapping int32): the sparse-gradient deduplication DLRM
    frameworks do before the optimiser step."""
    check_batch(config, indices, offsets)
    keys, bag_of = batch_keys(config, indices, offsets)
    distinct, inverse = np.unique(keys, return_inverse=True)
    # The indices sorted by row, then a segment sum (not np.add.at, which is slow).
    order = np.argsort(inverse, kind="stable")
    starts = np.searchsorted(inverse[order], np.arange(len(distinct)))
    deltas = np.asarray(deltas, dtype=np.int64)
    if not len(distinct):
        return distinct, np.zeros((0, config.dim), np.int32)
    return distinct, wrap32(np.add.reduceat(deltas[bag_of[order]], starts, axis=0))


def coalesced_deltas(config, keys, sums):
    """:func:`key_deltas`'s ``keys`` and ``sums`` as a coalesced update's ``(indices,
    offsets, deltas)``, in the device's bag order (:func:`coalesced_layout`)."""
    out_idx, new_offsets, bags = coalesced_layout(config, keys)
    out_deltas = np.zeros((len(new_offsets) - 1, config.dim), dtype=np.int32)
    out_deltas[bags] = sums
    return out_idx, new_offsets, out_deltas


def coalesce_update(config, indices, offsets, deltas):
    """The same update with every row once: ``(indices, offsets, deltas)`` of a coalesced batch.

    A row's contributions are summed (wrapping int32, so the result of
    :func:`embedding_update` does not change, :func:`key_deltas`) and the rows are
    laid out in the device's bag order (:func:`coalesced_layout`); the device then
    reads and writes each row once.
    """
    return coalesced_deltas(config, *key_deltas(config, indices, offsets, deltas))


def pool_rows(config, rows, slots, offsets):
    """Pooled vectors of a batch from its distinct rows: bag ``k`` sums ``rows[slots[i]]``
    over its indices ``i`` (wrapping int32, as the device pools)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    pooled = np.zeros((len(offsets) - 1, config.dim), dtype=np.int64)
    full = np.diff(offsets) > 0         # a bag's indices are contiguous: sum each run
    if full.any():
        pooled[full] = np.add.reduceat(np.asarray(rows, dtype=np.int64)[slots],
                                       offsets[:-1][full], axis=0)
    return wrap32(pooled)


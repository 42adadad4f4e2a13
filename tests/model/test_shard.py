"""A pool device's share of the batches and of the training arithmetic."""

import numpy as np
import pytest

from trainingcxl.spec.config import PoolShape
from trainingcxl.spec.pool import shards
from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.dlrm import FixedPointTrainer, FloatTrainer
from trainingcxl.host.model.fixed import from_fixed
from trainingcxl.host.model.golden import embedding_bag_sum
from trainingcxl.host.model.shard import ShardData, model_inputs, shard_bags, shard_batch


def test_a_shard_batch_is_the_bags_of_its_tables_in_order():
    cfg = PRESETS["small"]
    batch = SyntheticWorkload(cfg, seed=3, batch_size=8).batch(0)
    tables = initial_tables(cfg, 3)
    full = embedding_bag_sum(cfg, tables, batch.indices, batch.offsets).pooled
    for ids in [(0,), (1, 3), (0, 1, 2, 3)]:
        part = shard_batch(batch, ids)
        mine = cfg.replace(tables=tuple(cfg.tables[t] for t in ids))
        got = embedding_bag_sum(mine, [tables[t] for t in ids], part.indices, part.offsets).pooled
        assert np.array_equal(got, full[shard_bags(8, cfg.n_tables, ids)])


def test_a_device_makes_its_tables_as_the_whole_model_would():
    cfg = PRESETS["small"]
    every = initial_tables(cfg, 5)
    some = initial_tables(cfg, 5, only=(1, 3))
    assert all(np.array_equal(a, b) for a, b in zip(some, [every[1], every[3]]))


def test_a_device_makes_the_rows_of_its_pieces_as_the_whole_model_would():
    cfg = PRESETS["small"]
    every = initial_tables(cfg, 5)
    some = initial_tables(cfg, 5, only=(0, 0, 2), ranges=((0, 10), (300, 512), (7, 9)))
    for got, want in zip(some, [every[0][:10], every[0][300:], every[2][7:9]]):
        assert np.array_equal(got, want)


def test_a_split_tables_pieces_pool_to_its_bags_sum():
    cfg = PRESETS["small"]
    batch = SyntheticWorkload(cfg, seed=2, batch_size=8).batch(0)
    tables = initial_tables(cfg, 2)
    full = embedding_bag_sum(cfg, tables, batch.indices, batch.offsets).pooled
    pieces = [((1,), ((0, 100),)), ((1, 3), ((100, 256), (0, 128)))]
    parts = []
    for ids, ranges in pieces:
        part = shard_batch(batch, ids, ranges)
        mine = cfg.replace(tables=tuple(hi - lo for lo, hi in ranges))
        rows = [tables[t][lo:hi] for t, (lo, hi) in zip(ids, ranges)]
        got = embedding_bag_sum(mine, rows, part.indices, part.offsets).pooled
        parts.append(got.reshape(8, len(ids), cfg.dim))
    summed = model_inputs([ids for ids, _ in pieces], parts)
    assert np.array_equal(summed[:, 1], full.reshape(8, 4, cfg.dim)[:, 1])
    assert np.array_equal(summed[:, 3], full.reshape(8, 4, cfg.dim)[:, 3])


@pytest.mark.parametrize("devices, split", [(3, False), (6, True)])
def test_a_pool_trains_the_model_one_device_trains_bit_for_bit(devices, split):
    cfg = PRESETS["small"].replace(pool=PoolShape(devices=devices, split=split))
    data = SyntheticWorkload(cfg, seed=1, batch_size=16)
    tables = initial_tables(cfg, 1)
    whole = [FixedPointTrainer(cfg, tables, seed=1), FloatTrainer(cfg, tables, seed=1)]
    plan = shards(cfg)
    assert (sum(len(s.tables) for s in plan) > cfg.n_tables) == split     # pieces of tables
    parts = [[kind(s.config, initial_tables(cfg, 1, only=s.tables, ranges=s.ranges), seed=1,
                   own=s.tables)
              for kind in (FixedPointTrainer, FloatTrainer)] for s in plan]
    for i in range(4):
        want = [t.step(data.batch(i)).loss for t in whole]
        batches = [ShardData(data, s.tables, s.ranges).batch(i) for s in plan]
        inputs = [[t.inputs(b) for t in mine] for mine, b in zip(parts, batches)]
        # The golden model's parts cross in fixed point, the reference's in float32.
        fixed = model_inputs([s.tables for s in plan],
                             [x[0][0].reshape(16, -1, cfg.dim) for x in inputs])
        every = [from_fixed(fixed, cfg.fixed.frac_bits).astype(np.float32),
                 model_inputs([s.tables for s in plan], [x[1][1] for x in inputs])]
        for mine, b, own in zip(parts, batches, inputs):
            got = [t.step(b, own[k], every[k]).loss for k, t in enumerate(mine)]
            assert got[0] == want[0]
            # The float32 reference adds a split table's pieces in another order.
            assert got[1] == want[1] or (split and abs(got[1] - want[1]) < 1e-5)
    for s, mine in zip(plan, parts):
        trainer, full = mine[0], whole[0]
        for a, t, (lo, hi) in zip(trainer.tables, s.tables, s.ranges):
            assert np.array_equal(a, full.tables[t][lo:hi])
        assert np.array_equal(trainer.dense.parameters(), full.dense.parameters())

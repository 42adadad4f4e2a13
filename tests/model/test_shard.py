"""A pool device's share of the batches and of the training arithmetic."""

import numpy as np

from trainingcxl.spec.config import PoolShape
from trainingcxl.spec.pool import shards
from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.dlrm import FixedPointTrainer, FloatTrainer
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


def test_a_pool_trains_the_model_one_device_trains_bit_for_bit():
    cfg = PRESETS["small"].replace(pool=PoolShape(devices=3))
    data = SyntheticWorkload(cfg, seed=1, batch_size=16)
    tables = initial_tables(cfg, 1)
    whole = [FixedPointTrainer(cfg, tables, seed=1), FloatTrainer(cfg, tables, seed=1)]
    plan = shards(cfg)
    parts = [[kind(s.config, initial_tables(cfg, 1, only=s.tables), seed=1, own=s.tables)
              for kind in (FixedPointTrainer, FloatTrainer)] for s in plan]
    for i in range(4):
        want = [t.step(data.batch(i)).loss for t in whole]
        batches = [ShardData(data, s.tables).batch(i) for s in plan]
        inputs = [[t.inputs(b) for t in mine] for mine, b in zip(parts, batches)]
        every = [model_inputs([s.tables for s in plan], [x[k][1] for x in inputs]) for k in range(2)]
        for mine, b, own in zip(parts, batches, inputs):
            got = [t.step(b, own[k], every[k]).loss for k, t in enumerate(mine)]
            assert got == want
    for s, mine in zip(plan, parts):
        for trainer, full in zip(mine, whole):
            assert all(np.array_equal(a, full.tables[t]) for a, t in zip(trainer.tables, s.tables))
            assert np.array_equal(trainer.dense.parameters(), full.dense.parameters())

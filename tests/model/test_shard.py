"""A pool device's share of the batches and of the training arithmetic."""

import threading

import numpy as np

from trainingcxl.spec.config import PoolShape
from trainingcxl.spec.pool import shards
from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.dlrm import FixedPointTrainer, FloatTrainer
from trainingcxl.host.model.golden import embedding_bag_sum
from trainingcxl.host.model.shard import ShardData, shard_bags, shard_batch


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


class _Pool:
    """The pool's exchange in one process: each device's trainer in a thread of its own."""

    def __init__(self, plan, n_tables):
        self.plan, self.n_tables = plan, n_tables
        self.barrier = threading.Barrier(len(plan))
        self.parts = {}

    def member(self, s):
        pool = self

        class Share:
            tables = s.tables

            def gather(self, kind, part):
                pool.parts[s.device] = part
                pool.barrier.wait()
                out = np.empty((part.shape[0], pool.n_tables, part.shape[2]), part.dtype)
                for d, p in pool.parts.items():
                    out[:, list(pool.plan[d].tables), :] = p
                pool.barrier.wait()
                return out
        return Share()


def test_a_pool_trains_the_model_one_device_trains_bit_for_bit():
    cfg = PRESETS["small"].replace(pool=PoolShape(devices=3))
    data = SyntheticWorkload(cfg, seed=1, batch_size=16)
    tables = initial_tables(cfg, 1)
    whole = [FixedPointTrainer(cfg, tables, seed=1), FloatTrainer(cfg, tables, seed=1)]
    plan = shards(cfg)
    exchange = [_Pool(plan, cfg.n_tables) for _ in whole]
    parts = {s.device: [kind(s.config, initial_tables(cfg, 1, only=s.tables), seed=1,
                             share=x.member(s))
                        for kind, x in zip((FixedPointTrainer, FloatTrainer), exchange)]
             for s in plan}
    losses = {}

    def train(d):
        mine = ShardData(data, plan[d].tables)
        losses[d] = [[t.step(mine.batch(i)).loss for t in parts[d]] for i in range(4)]

    threads = [threading.Thread(target=train, args=(d,)) for d in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = [[t.step(data.batch(i)).loss for t in whole] for i in range(4)]
    assert all(losses[d] == want for d in parts)
    for s in plan:
        for mine, full in zip(parts[s.device], whole):
            assert all(np.array_equal(a, full.tables[t]) for a, t in zip(mine.tables, s.tables))
            assert np.array_equal(mine.dense.parameters(), full.dense.parameters())

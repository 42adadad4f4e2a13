"""The pool's placement of tables and each device's configuration."""

import pytest

from trainingcxl.spec.config import ConfigError, PoolShape
from trainingcxl.spec.pool import shards
from trainingcxl.spec.presets import PRESETS


def pool(name, devices, **kw):
    cfg = PRESETS[name]
    return cfg.replace(pool=PoolShape(devices=devices, **kw))


def test_one_device_is_the_configuration_itself():
    cfg = PRESETS["small"]
    (only,) = shards(cfg)
    assert only.config is cfg and only.tables == tuple(range(cfg.n_tables))


@pytest.mark.parametrize("devices", [2, 3, 4, 8])
def test_every_table_is_on_one_device_and_the_rows_are_balanced(devices):
    cfg = pool("criteo-kaggle", devices)
    plan = shards(cfg)
    held = sorted(t for s in plan for t in s.tables)
    assert held == list(range(cfg.n_tables))
    loads = [sum(cfg.tables[t] for t in s.tables) for s in plan]
    # Greedy largest-first: no device exceeds the mean by more than the largest table.
    assert max(loads) - sum(loads) / devices <= max(cfg.tables)
    for s in plan:
        assert s.config.tables == tuple(cfg.tables[t] for t in s.tables)


def test_a_device_snapshots_the_whole_mlp_and_pays_the_switch():
    cfg = pool("small", 2, switch_latency=7)
    for s in shards(cfg):
        assert s.config.n_tables < cfg.n_tables
        assert s.config.mlp_params == cfg.mlp_params            # the model's MLP, all tables
        assert s.config.snapshot_size == cfg.snapshot_size
        assert s.config.link.latency == cfg.link.latency + 7
        assert s.config.pool.devices == 1


def test_more_devices_than_tables_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="at most 4 devices"):
        shards(pool("small", 5))


def test_the_pool_does_not_change_the_device_build():
    cfg = PRESETS["small"]
    assert pool("small", 3).hardware_digest() == cfg.hardware_digest()

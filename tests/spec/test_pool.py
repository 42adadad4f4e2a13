"""The pool's placement of tables and each device's configuration."""

import pytest

from trainingcxl.spec.config import ConfigError, PoolShape
from trainingcxl.spec.pool import BALANCE, shards
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
    with pytest.raises(ConfigError, match="at most 4 devices.*pool.split"):
        shards(pool("small", 5))


@pytest.mark.parametrize("name, devices", [("small", 5), ("small", 8), ("criteo-kaggle", 8),
                                           ("criteo-kaggle", 64)])
def test_split_tables_cover_every_row_once_and_balance_the_devices(name, devices):
    cfg = pool(name, devices, split=True)
    plan = shards(cfg)
    held = sorted((t, lo, hi) for s in plan for t, (lo, hi) in zip(s.tables, s.ranges))
    for t, rows in enumerate(cfg.tables):
        mine = [(lo, hi) for u, lo, hi in held if u == t]
        assert mine[0][0] == 0 and mine[-1][1] == rows
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))
    share = -(-sum(cfg.tables) // devices)
    loads = [sum(s.config.tables) for s in plan]
    assert max(loads) <= share * (1 + BALANCE)
    for s in plan:
        assert s.config.tables == tuple(hi - lo for lo, hi in s.ranges)


def test_split_changes_nothing_where_whole_tables_balance():
    # small on 2 devices: one table (1,024 rows) is over a share (960 rows).
    whole, split = shards(pool("small", 2)), shards(pool("small", 2, split=True))
    assert [s.tables for s in whole] == [(2,), (0, 1, 3)]
    assert [s.label(PRESETS["small"].tables) for s in split] != \
        [s.label(PRESETS["small"].tables) for s in whole]
    # kaggle-like's 26 equal tables: 13 a device on 2, exactly a share each.
    two = pool("kaggle-like", 2)
    assert shards(two) == shards(pool("kaggle-like", 2, split=True))


def test_the_pool_does_not_change_the_device_build():
    cfg = PRESETS["small"]
    assert pool("small", 3).hardware_digest() == cfg.hardware_digest()

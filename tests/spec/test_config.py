"""The configuration object: validation, derived geometry, serialisation."""

import json

import pytest

from trainingcxl.spec.config import Config, ConfigError, PmemTiming
from trainingcxl.spec.presets import PRESETS, load_config


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip_through_json(name):
    cfg = PRESETS[name]
    assert Config.from_json(cfg.to_json()) == cfg
    assert load_config(name) is cfg


def test_memory_map_is_contiguous_and_protected_regions_follow_the_tables():
    cfg = Config(tables=(10, 20), dim=32, log_lines=26, commit_lines=2, snapshot_lines=5)
    assert cfg.lines_per_row == 2 and cfg.group_lines == 13 and cfg.log_groups == 2
    assert cfg.table_base == (0, 20)
    assert cfg.table_lines == 60
    assert (cfg.log_base, cfg.commit_base, cfg.ring_base, cfg.snapshot_base) == (
        60, 86, 88, (90, 95))
    assert cfg.media_lines == 100


@pytest.mark.parametrize("kwargs,field", [
    ({"dim": 10}, "dim"),
    ({"tables": ()}, "tables"),
    ({"tables": (0,)}, "tables[0]"),
    ({"max_pooling": 1000}, "max_pooling"),
    ({"cache_ids": 6}, "cache_ids"),
    ({"hdm_base": 3}, "hdm_base"),
    ({"crc_folds": 3}, "crc_folds"),
    ({"line_beats": 3}, "line_beats"),
    ({"line_beats": 4}, "register_slices"),
    ({"line_beats": 8, "register_slices": True, "pmem": PmemTiming(read_latency=14)},
     "pmem.read_latency"),
    ({"line_beats": 8, "register_slices": True, "pmem": PmemTiming(write_latency=4)},
     "pmem.write_latency"),
    ({"register_slices": 1}, "register_slices"),
    ({"blocks": ("update", "fast")}, "blocks"),
    ({"relaxed_lookup": True, "blocks": ("update",)}, "relaxed_lookup"),
])
def test_invalid_configurations_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field.replace("[", r"\[")):
        Config(**kwargs)


def test_invalid_timing_is_refused():
    with pytest.raises(ConfigError, match="pmem.read_rate"):
        PmemTiming(read_rate=(3, 2))
    with pytest.raises(ConfigError, match="pmem.write_latency"):
        PmemTiming(write_latency=0)


def test_load_from_files(tmp_path):
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"tables": [8, 8], "pmem": {"read_latency": 30, "read_rate": [1, 2]}}))
    cfg = load_config(str(j))
    assert cfg.tables == (8, 8) and cfg.pmem.read_latency == 30 and cfg.pmem.read_rate == (1, 2)
    t = tmp_path / "c.toml"
    t.write_text("tables = [4, 4, 4]\ndim = 32\n[fixed]\nfrac_bits = 12\n")
    cfg = load_config(str(t))
    assert cfg.n_tables == 3 and cfg.dim == 32 and cfg.fixed.frac_bits == 12
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"tabels": [1]}))
    with pytest.raises(ConfigError, match="unknown configuration keys: tabels"):
        load_config(str(bad))
    with pytest.raises(ConfigError, match="neither a preset"):
        load_config(str(tmp_path / "missing.json"))


def test_checkpoint_regions_size_themselves():
    from trainingcxl.spec.config import ModelShape
    from trainingcxl.host.model.dlrm import DenseModel
    for name, cfg in PRESETS.items():
        assert cfg.mlp_params == DenseModel(cfg).parameters().size, name
        assert cfg.snapshot_size == cfg.mlp_lines + 1
        assert cfg.log_groups >= 2 * cfg.groups_for(cfg.records_per_batch(cfg.model.batch_size))
    tiny = PRESETS["tiny"]
    bigger = tiny.replace(model=ModelShape(batch_size=64, bottom_hidden=(32,), top_hidden=(32,)))
    # Sizes follow the model, and the resolved sizes are part of the hardware.
    assert bigger.log_size >= tiny.log_size
    assert tiny.replace(model=ModelShape(bottom_hidden=(64,), top_hidden=(32,), batch_size=16)
                        ).hardware_digest() != tiny.hardware_digest()
    with pytest.raises(ConfigError, match="commit_lines"):
        tiny.replace(commit_lines=1)


def test_criteo_kaggle_is_the_reference_model_with_hashed_tables():
    from trainingcxl.spec.presets import CRITEO_KAGGLE_ROWS, CRITEO_KAGGLE_CAP
    cfg = PRESETS["criteo-kaggle"]
    assert len(CRITEO_KAGGLE_ROWS) == 26 and sum(CRITEO_KAGGLE_ROWS) == 33_762_577
    assert cfg.tables == tuple(min(r, CRITEO_KAGGLE_CAP) for r in CRITEO_KAGGLE_ROWS)
    assert sum(cfg.tables) >= 1_000_000 and max(cfg.tables) == 1 << 18
    assert (cfg.dim, cfg.max_pooling, cfg.model.dense_features) == (16, 1, 13)
    assert (cfg.model.bottom_hidden, cfg.model.top_hidden) == ((512, 256, 64), (512, 256))
    assert cfg.model.batch_size >= 128 and cfg.model.lr == 0.1
    assert cfg.max_bags >= cfg.model.batch_size * 26
    # The undo log holds two batches of distinct rows; the media stays at 128 MiB.
    assert cfg.log_groups >= 2 * cfg.groups_for(cfg.model.batch_size * 26)
    assert cfg.media_lines_pow2 <= 1 << 21


def test_the_scale_ladder_covers_its_grid():
    from trainingcxl.spec.presets import SCALE_BATCHES, rm_config, scale_ladder
    ladder = scale_ladder()
    assert [name for name, _ in ladder] == [f"rm-{r}/b{b}" for r in ("1k", "100k", "1m")
                                            for b in (32, 256, 2048)]
    for name, cfg in ladder:
        rows, batch = cfg.tables[0], cfg.model.batch_size
        assert cfg.tables == (rows,) * 8 and rows in (1_000, 100_000, 1_000_000), name
        assert cfg.max_bags >= max(SCALE_BATCHES) * cfg.n_tables, name
        assert cfg.log_groups >= 2 * cfg.groups_for(cfg.records_per_batch(batch)), name
        assert 16 <= cfg.max_pooling <= 32
        assert Config.from_json(cfg.to_json()) == cfg
    # One device per table size: every batch size of it shares the simulator build.
    digests = {}
    for name, cfg in ladder:
        digests.setdefault(name.split("/")[0], set()).add(cfg.hardware_digest())
    assert {k: len(v) for k, v in digests.items()} == {"rm-1k": 1, "rm-100k": 1, "rm-1m": 1}
    assert len(set.union(*digests.values())) == 3
    for name in ("rm-1k", "rm-100k", "rm-1m"):
        assert PRESETS[name] == rm_config(PRESETS[name].tables[0])
    assert PRESETS["rm-1m"].media_lines_pow2 <= 1 << 24
    with pytest.raises(ConfigError, match=r"tables\[0\] must be a row count in \[1, 2\*\*24\]"):
        rm_config((1 << 24) + 1)
    with pytest.raises(ConfigError, match="model.batch_size must be a positive integer"):
        rm_config(1000, 0)

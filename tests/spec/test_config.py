"""The configuration object: validation, derived geometry, serialisation."""

import json

import pytest

from trainingcxl.spec.config import PRESETS, Config, ConfigError, PmemTiming, load_config


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip_through_json(name):
    cfg = PRESETS[name]
    assert Config.from_json(cfg.to_json()) == cfg
    assert load_config(name) is cfg


def test_memory_map_is_contiguous_and_protected_regions_follow_the_tables():
    cfg = Config(tables=(10, 20), dim=32, log_lines=8, commit_lines=2, snapshot_lines=5)
    assert cfg.lines_per_row == 2
    assert cfg.table_base == (0, 20)
    assert cfg.table_lines == 60
    assert (cfg.log_base, cfg.commit_base, cfg.ring_base, cfg.snapshot_base) == (
        60, 68, 70, (72, 77))
    assert cfg.media_lines == 82


@pytest.mark.parametrize("kwargs,field", [
    ({"dim": 10}, "dim"),
    ({"tables": ()}, "tables"),
    ({"tables": (0,)}, "tables[0]"),
    ({"max_pooling": 1000}, "max_pooling"),
    ({"cache_ids": 6}, "cache_ids"),
    ({"hdm_base": 3}, "hdm_base"),
    ({"crc_folds": 3}, "crc_folds"),
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
        assert cfg.log_slots >= 2 * cfg.records_per_batch(cfg.model.batch_size)
    tiny = PRESETS["tiny"]
    bigger = tiny.replace(model=ModelShape(batch_size=64, bottom_hidden=(32,), top_hidden=(32,)))
    # Sizes follow the model, and the resolved sizes are part of the hardware.
    assert bigger.log_size >= tiny.log_size
    assert tiny.replace(model=ModelShape(bottom_hidden=(64,), top_hidden=(32,), batch_size=16)
                        ).hardware_digest() != tiny.hardware_digest()
    with pytest.raises(ConfigError, match="commit_lines"):
        tiny.replace(commit_lines=1)

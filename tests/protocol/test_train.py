"""Short training runs on the simulated device, under both simulators.

The application (:mod:`trainingcxl.host.apps.train`) itself fails unless every pooled
vector and every table check equals the golden model; these tests add the
record's own consistency.
"""


import numpy as np
import pytest

from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.model.criteo import write_sample
from trainingcxl.host.model.export import load_exported
from trainingcxl.host.apps.launch import launch
from trainingcxl.host.jobs import CAMPAIGN_SYSTEM, TrainJob

pytestmark = pytest.mark.cocotb
CONFIG = PRESETS["tiny"]


def run(sim, tmp_path, config=CONFIG, **args):
    small = sim == "icarus"                     # Icarus is about 30x slower
    job = {"seed": 2, "batches": 3 if small else 8, "batch_size": 8 if small else 16,
           "check_every": 2 if small else 4, **args}
    rec = launch(TrainJob(system=CAMPAIGN_SYSTEM, test_samples=0).replace(**job), config,
                 sim=sim, name=f"train-{tmp_path.name}").to_dict()     # the JSON it writes
    assert rec["golden_match"] and rec["pooled_mismatches"] == 0 and not rec["errors"]
    assert len(rec["loss"]) == job["batches"]
    assert [c["batch"] for c in rec["checks"]][0] == 0
    assert rec["checks"][-1]["batch"] == job["batches"] - 1
    assert abs(rec["final_loss"] - rec["final_loss_ref"]) <= 0.02 * rec["final_loss_ref"]
    # Updates are coalesced: every distinct row of a batch is rewritten once, and it is
    # the row the batch logged once (gathered once per index, duplicates included).
    c = rec["counters"]
    assert c["update_lines"] == c["log_records"] * config.lines_per_row > 0
    if not rec["fallbacks"]:        # a relaxed lookup that overflowed is gathered twice
        assert c["lookup_lines"] >= c["update_lines"]
    return rec


def assert_evaluated(rec, batches, samples):
    """Held-out metrics after each of ``batches``: the device-trained model (its tables read
    back) and the float32 reference agree closely."""
    assert [e["batch"] for e in rec["eval"]] == batches
    assert rec["test_set"]["samples"] == samples
    for e in rec["eval"]:
        d, r = e["device"], e["reference"]
        assert d["samples"] == samples and 0 < d["positives"] < samples
        assert 0 <= d["auc"] <= 1 and abs(d["auc"] - r["auc"]) < 0.02
        assert abs(d["log_loss"] - r["log_loss"]) < 0.02


def test_train_synthetic(sim, tmp_path):
    rec = run(sim, tmp_path, test_samples=128, eval_every=2, export=str(tmp_path / "model"),
              dump=str(tmp_path / "dump"))
    n = len(rec["loss"])
    assert_evaluated(rec, sorted({*range(2, n + 1, 2), n}), 128)
    # The exported model is the device's: its tables, scaled, and the GPU's MLPs.
    arrays, meta = load_exported(tmp_path / "model")
    tables, mlp = np.load(tmp_path / "dump" / "tables.npz"), np.load(tmp_path / "dump" / "mlp.npz")
    for t in range(CONFIG.n_tables):
        np.testing.assert_array_equal(
            arrays[f"embeddings.{t}.weight"] * 2 ** CONFIG.fixed.frac_bits, tables[f"table{t}"])
    np.testing.assert_array_equal(arrays["top_mlp.0.weight"], mlp["top_w0"])
    assert meta["tables"] == list(CONFIG.tables)


@pytest.mark.parametrize("relaxed", [False, True])
def test_an_update_with_more_rows_than_a_descriptor_holds_goes_out_in_chunks(relaxed, tmp_path):
    """Batches of 16 samples on 32 bags: up to 256 distinct rows a batch, in coalesced
    UPDATEs of 32 rows each. Every distinct row is still rewritten once (``run``)."""
    from trainingcxl.host.model.regions import distinct_rows
    from trainingcxl.host.model.data import SyntheticWorkload
    cfg = CONFIG.replace(max_bags=32)
    data = SyntheticWorkload(cfg, seed=2, batch_size=16, min_pooling=4)
    assert max(distinct_rows(cfg, data.batch(i)) for i in range(4)) > cfg.max_bags
    run("verilator", tmp_path, config=cfg, batches=4, batch_size=16, min_pooling=4,
        relaxed=relaxed)


@pytest.mark.parametrize("relaxed", [False, True])
def test_a_lookup_of_repeated_rows_reads_each_row_once(relaxed, tmp_path):
    """Bags of 6 to 8 rows of small tables, and a GPU whose kernels cost nothing to launch:
    every batch's lookup gathers each distinct row once (the GPU pools), so the device
    reads each row once for the lookup and once for the update, in both orders."""
    import dataclasses
    from trainingcxl.host.model.data import SyntheticWorkload
    from trainingcxl.host.model.golden import batch_keys
    from trainingcxl.host.protocol.strategies import gathers_rows
    cfg = CONFIG.replace(max_bags=32, gpu=dataclasses.replace(CONFIG.gpu, launch_cycles=0))
    data = SyntheticWorkload(cfg, seed=2, batch_size=16, min_pooling=6)
    for i in range(4):
        b = data.batch(i)
        keys, _ = batch_keys(cfg, b.indices, b.offsets)
        assert gathers_rows(cfg, b, len(set(keys.tolist())))
    rec = run("verilator", tmp_path, config=cfg, batches=4, batch_size=16, min_pooling=6,
              relaxed=relaxed)
    c = rec["counters"]
    assert c["lookup_lines"] == c["update_lines"] == c["log_records"] * cfg.lines_per_row
    assert not rec["fallbacks"]


def test_train_criteo_sample(sim, tmp_path):
    sample = write_sample(tmp_path / "sample.tsv", lines=200, seed=4)
    rec = run(sim, tmp_path, data=str(sample), test_fraction=0.25)
    # Criteo bags hold one row each: one gathered line per bag.
    assert rec["counters"]["lookup_bags"] == rec["counters"]["lookup_lines"]
    assert_evaluated(rec, [len(rec["loss"])], 50)


def test_relaxed_order_trains_bit_identically(sim, tmp_path):
    strict = run(sim, tmp_path)
    relaxed = run(sim, tmp_path, relaxed=True)
    assert relaxed["relaxed"] and not strict["relaxed"]
    # Bit-identical pooled vectors give the very same losses, batch by batch.
    assert relaxed["loss"] == strict["loss"]
    assert relaxed["counters"]["update_lines"] == strict["counters"]["update_lines"]


def test_relaxed_order_gathers_rows_where_the_deferred_list_would_overflow(sim, tmp_path):
    """With a deferred list of 2 entries nearly every relaxed lookup would overflow it:
    the host sees that coming and gathers those batches' rows instead (the rows the batch
    before touches after its update), so the overlap never falls back to strict order
    and trains as strict order does. (The device's DEFER_OVERFLOW itself:
    tests/driver/test_device.py.)"""
    small_list = CONFIG.replace(defer_depth=2)
    strict = run(sim, tmp_path, config=small_list)
    relaxed = run(sim, tmp_path, config=small_list, relaxed=True)
    assert relaxed["fallbacks"] == 0
    assert relaxed["counters"]["lookup_lines"] < strict["counters"]["lookup_lines"]
    assert relaxed["loss"] == strict["loss"]

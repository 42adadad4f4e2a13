"""DLRM training on the simulated device: the job behind ``trainingcxl train``.

Each batch: the device pools the batch's embeddings (``LOOKUP``) and logs the
old rows; the GPU model runs the MLPs forward and backward on the pooled
vectors, charging its cycle cost while the simulation runs on; it hands the
device one delta per bag (already scaled by the learning rate, see
:mod:`trainingcxl.host.model.dlrm`); the device applies them (``UPDATE``), commits
the batch (``COMMIT``) and pulls a snapshot of the MLP (``SNAPSHOT_MLP``).
Beside it the golden model trains on the same data: every pooled vector is
compared bit for bit, and the tables are read back (straight from the media's
backdoor RAM under Verilator, through CXL.mem under Icarus) and compared at
the first and last batch and every ``check_every`` batches. A
float32 reference trains on the same data too. Power failures, when asked
for, are injected and recovered from (:mod:`trainingcxl.host.protocol.training`).

In relaxed order (``relaxed``, or the configuration's ``relaxed_lookup``)
the lookup of batch ``i+1`` runs while the GPU computes batch ``i``, before
batch ``i``'s update; ``FINISH`` completes it after the update
(docs/relaxed-lookup.md). The checks are the same, so the run proves the
relaxed order bit-identical to the strict one.

Arguments (from the runner): ``seed``, ``batches``, ``batch_size``, ``data``
(``"synthetic"`` or a Criteo-format path), ``on_bad_lines``, ``check_every``,
the held-out test set (``test``: a Criteo-format path; ``test_fraction``: the
last part of ``data``; ``test_samples``: samples of another synthetic stream;
none of them: no evaluation) and ``eval_every``,
``relaxed``, ``staleness``, ``failures`` (a :class:`FailurePlan` entry list),
``failure_seed``, ``until_plan_done`` (stop once every planned failure has
happened), ``extend`` (train past ``batches``, up to 4x, until they have),
``quiet``, ``dump`` (a folder), ``export`` (a folder: the trained model as a
PyTorch state dict, :mod:`trainingcxl.host.model.export`), ``min_pooling`` and
``zipf_alpha`` (of synthetic data), ``system`` (a rung of the ladder,
:mod:`trainingcxl.host.protocol.systems`), ``checkpointing`` (false: no log, commits
or snapshots), ``measure_from`` (first batch of the measured window, whose
counter deltas go to ``window``) and ``out`` (the JSON record).
"""

import gc
import json
import time
from pathlib import Path

import cocotb
import numpy as np

from trainingcxl.host.model.criteo import CriteoDataset
from trainingcxl.host.model.data import SyntheticWorkload
from trainingcxl.host.model.export import export_model
from trainingcxl.host.driver.ports import DeviceTB
from ..bench_env import bench_args, bench_config
from trainingcxl.host.protocol.systems import system
from trainingcxl.host.protocol.timed import FailurePlan, SimRuntime
from trainingcxl.host.protocol.training import TrainingRun, progress


def datasets(cfg, args):
    """The training data and the held-out test set (``None``: no evaluation)."""
    data = args.get("data", "synthetic")
    if data == "synthetic":
        train = SyntheticWorkload(cfg, seed=args.get("seed", 0), batch_size=args["batch_size"],
                                  min_pooling=args.get("min_pooling", 0),
                                  zipf_alpha=args.get("zipf_alpha", 1.05))
        samples = args.get("test_samples", 0)
        return train, (train.test_set(samples) if samples else None)
    on_error = args.get("on_bad_lines", "raise")
    train = CriteoDataset(cfg, data, batch_size=args["batch_size"], on_error=on_error)
    if args.get("test_fraction"):
        train, held = train.split(args["test_fraction"])
        return train, held.test_set(f"the last {len(held)} samples of {Path(data).name}")
    if args.get("test"):
        return train, CriteoDataset(cfg, args["test"], batch_size=args["batch_size"],
                                    on_error=on_error).test_set()
    return train, None


@cocotb.test()
async def train_job(dut):
    args = bench_args()
    cfg = bench_config()
    n = args.get("batches", 50)
    data, test_set = datasets(cfg, args)
    tb = DeviceTB(dut, cfg, seed=args.get("seed", 0), protocol_checks=False)
    await tb.reset()
    await tb.check_identity()
    plan = FailurePlan(args.get("failures", []), seed=args.get("failure_seed", 0))
    run = TrainingRun(tb, data, system=system(args.get("system", "cxl-b")), runtime=SimRuntime(),
                      failures=plan, batches=n, seed=args.get("seed", 0),
                      staleness=args.get("staleness", 0),
                      relaxed=bool(args.get("relaxed", cfg.relaxed_lookup)),
                      check_every=args.get("check_every", 10),
                      until_plan_done=args.get("until_plan_done", False),
                      extend=args.get("extend", False),
                      log=(lambda text: None) if args.get("quiet") else progress,
                      checkpointing=args.get("checkpointing", True),
                      measure_from=args.get("measure_from"),
                      test_set=test_set, eval_every=args.get("eval_every", 0))
    # What exists now lives for the whole run: keep the collector from walking it again.
    gc.freeze()
    wall0 = time.perf_counter()
    try:
        record = await run.run()
    except Exception as e:
        # Keep what the run found (an inconsistent recovery, above all) for the report.
        record = run.record
        record["aborted"] = f"{type(e).__name__}: {e}"
        record.update({"golden_match": False, "counters": run.counters,
                       "wall_s": time.perf_counter() - wall0})
        with open(args["out"], "w") as f:
            json.dump(record, f, indent=2, default=str)
        raise
    done = sorted(record["loss"])
    for key in ("loss", "loss_ref", "cycles_per_batch"):
        record[key] = [record[key][b] for b in done]
    n = len(done)
    complete = n >= args.get("batches", 50) or args.get("until_plan_done", False)
    record.update({
        "final_loss": float(np.mean(record["loss"][-min(10, n):])),
        "final_loss_ref": float(np.mean(record["loss_ref"][-min(10, n):])),
        "counters": run.counters,
        "golden_match": (complete and record["pooled_mismatches"] == 0 and not record["errors"]
                         and all(c["tables_match"] for c in record["checks"])
                         and all(f["consistent"] for f in record["failures"])),
        "wall_s": time.perf_counter() - wall0,
    })
    if getattr(data, "skipped", 0):
        record["skipped_lines"] = data.skipped
    final = await tb.read_tables() if "dump" in args or "export" in args else None
    if "dump" in args:
        out = Path(args["dump"])
        out.mkdir(parents=True, exist_ok=True)
        np.savez(out / "tables.npz", **{f"table{t}": x for t, x in enumerate(final)})
        mlp = {}
        for part, layers in (("bottom", run.gpu.model.bottom), ("top", run.gpu.model.top)):
            for k, (w, b) in enumerate(layers):
                mlp[f"{part}_w{k}"], mlp[f"{part}_b{k}"] = w, b
        np.savez(out / "mlp.npz", **mlp)
        used = {}
        for i in range(args.get("batches", 50)):
            batch = data.batch(i)
            used[f"indices_{i}"], used[f"offsets_{i}"] = batch.indices, batch.offsets
            used[f"dense_{i}"], used[f"labels_{i}"] = batch.dense, batch.labels
        np.savez(out / "batches.npz", **used)
    if "export" in args:
        # The device-trained model: the tables read back, the GPU's MLPs.
        export_model(cfg, final, run.gpu.model, args["export"])
    with open(args["out"], "w") as f:
        json.dump(record, f, indent=2)
    assert record["golden_match"], "the device diverged from the golden model (see the progress lines)"

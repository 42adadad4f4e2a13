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

The job is a :class:`~trainingcxl.host.jobs.TrainJob`; the record is written as JSON
where :func:`~.launch.launch` asks.
"""

import gc
import json
import re
import signal
import time
from pathlib import Path

import cocotb
import numpy as np

from trainingcxl.host.model.criteo import CriteoDataset
from trainingcxl.host.model.data import SyntheticWorkload
from trainingcxl.host.model.export import export_model
from trainingcxl.host.model.shard import ShardData
from trainingcxl.host.protocol.cpr import CprRecovery
from trainingcxl.host.protocol.hooks import ResumeReport
from trainingcxl.host.protocol.pool import PoolLink
from trainingcxl.host.protocol.pool_member import PoolMember
from trainingcxl.host.protocol.run_record import NULL
from trainingcxl.spec.config import Config
from trainingcxl.host.driver.ports import DeviceTB
from trainingcxl.sim.bench_env import bench_config
from trainingcxl.host.jobs import TrainJob
from trainingcxl.host.pmem.media_file import MediaFile
from .launch import read_job
from trainingcxl.host.protocol.systems import system
from trainingcxl.host.protocol.timed import FailurePlan, SimRuntime
from trainingcxl.host.protocol.training import TrainingRun, progress


def datasets(cfg, job):
    """The training data and the held-out test set (``None``: no evaluation) of a
    resolved :class:`~trainingcxl.host.jobs.TrainJob`."""
    if job.data == "synthetic":
        train = SyntheticWorkload(cfg, seed=job.seed, batch_size=job.batch_size,
                                  min_pooling=job.min_pooling, zipf_alpha=job.zipf_alpha)
        return train, (train.test_set(job.test_samples) if job.test_samples else None)
    train = CriteoDataset(cfg, job.data, batch_size=job.batch_size, on_error=job.on_bad_lines)
    if job.test_fraction:
        train, held = train.split(job.test_fraction)
        return train, held.test_set(f"the last {len(held)} samples of {Path(job.data).name}")
    if job.test:
        return train, CriteoDataset(cfg, job.test, batch_size=job.batch_size,
                                    on_error=job.on_bad_lines).test_set()
    return train, None


_BATCH_LINE = re.compile(r"\s*batch (\d+)/(\d+):")


def batch_lines(job):
    """The run's progress log as the job asks: every batch's line, every
    ``log_every``-th and the last, or (``quiet``) none; other lines (power failures,
    recoveries) always."""
    def log(text):
        m = _BATCH_LINE.match(text)
        if m:
            b, n = int(m[1]), int(m[2])
            if job.quiet or (b % job.log_every and b != n):
                return
        progress(text)
    return log


@cocotb.test()
async def train_job(dut):
    cfg = bench_config()
    job, out_path = read_job(TrainJob)
    job = job.resolved(cfg)
    hooks = []
    if job.pool_member:
        # One device of a pool: its share of the model's batches, no held-out test (the
        # model's tables are spread over the pool).
        member = job.pool_member
        model = Config.from_dict(member["model_config"])
        data = ShardData(datasets(model, job)[0], member["tables"], member["ranges"])
        test_set = None
        link = PoolLink(member["address"], member["authkey"], member["device"],
                        member["tables"], member["ranges"], member["model_rows"],
                        model.pool.devices)
        hooks.append(PoolMember(link))
        if job.cpr_settings() is not None:
            settings = dict(job.cpr_settings())
            hooks.append(CprRecovery(link, settings.pop("variant"), **settings))
    else:
        data, test_set = datasets(cfg, job)
    if job.resume and job.resume_report:
        # What RECOVER found, as soon as it is checked: a process killed any moment later
        # has said it (a kill campaign reads it).
        hooks.append(ResumeReport(job.resume_report))
    tb = DeviceTB(dut, cfg, seed=job.seed, protocol_checks=False)
    await tb.reset()
    await tb.check_identity()
    plan = FailurePlan(list(job.failures), seed=job.failure_seed)
    media = MediaFile(job.pmem) if job.pmem else None
    run = TrainingRun(tb, data, system=system(job.system), runtime=SimRuntime(),
                      failures=plan, batches=job.batches, seed=job.seed,
                      staleness=job.staleness, relaxed=job.relaxed,
                      check_every=job.check_every, until_plan_done=job.until_plan_done,
                      extend=job.extend, log=batch_lines(job),
                      checkpointing=job.checkpointing, measure_from=job.measure_from,
                      test_set=test_set, eval_every=job.eval_every,
                      resume=job.resume, replay=media.recoveries() if job.resume else (),
                      on_recovered=media.record_recovery if media else None, hooks=hooks)
    # SIGINT (Ctrl-C, or the command passing a stop on) and SIGTERM end the run after the
    # batch in progress, committed, checked and made durable with its MLPs.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: setattr(run, "stop_requested", True))
    # What exists now lives for the whole run: keep the collector from walking it again.
    gc.freeze()
    wall0 = time.perf_counter()
    try:
        record = await run.run()
    except Exception as e:
        # Keep what the run found (an inconsistent recovery, above all) for the report.
        record = run.record
        record.aborted = f"{type(e).__name__}: {e}"
        record.golden_match, record.counters = False, run.counters
        record.wall_s = time.perf_counter() - wall0
        with open(out_path, "w") as f:
            json.dump(record.to_dict(), f, indent=2, default=str)
        raise
    losses, losses_ref = record.losses("loss"), record.losses("loss_ref")
    n = len(losses)
    # A resumed run trains from its durable batch on (nothing, if that is the last).
    last = max(record.loss, default=record.first_batch - 1)
    complete = last >= job.batches or job.until_plan_done or bool(record.interrupted)
    record.final_loss = float(np.mean(losses[-min(10, n):])) if n else NULL
    record.final_loss_ref = float(np.mean(losses_ref[-min(10, n):])) if n else NULL
    record.counters = run.counters
    record.golden_match = (complete and record.pooled_mismatches == 0 and not record.errors
                           and all(c.tables_match for c in record.checks)
                           and all(f.consistent for f in record.failures))
    record.wall_s = time.perf_counter() - wall0
    if getattr(data, "skipped", 0):
        record.skipped_lines = data.skipped
    final = await tb.read_tables() if job.dump or job.export else None
    if job.dump:
        out = Path(job.dump)
        out.mkdir(parents=True, exist_ok=True)
        np.savez(out / "tables.npz", **{f"table{t}": x for t, x in enumerate(final)})
        mlp = {}
        for part, layers in (("bottom", run.gpu.model.bottom), ("top", run.gpu.model.top)):
            for k, (w, b) in enumerate(layers):
                mlp[f"{part}_w{k}"], mlp[f"{part}_b{k}"] = w, b
        np.savez(out / "mlp.npz", **mlp)
        used = {}
        for i in range(job.batches):
            batch = data.batch(i)
            used[f"indices_{i}"], used[f"offsets_{i}"] = batch.indices, batch.offsets
            used[f"dense_{i}"], used[f"labels_{i}"] = batch.dense, batch.labels
        np.savez(out / "batches.npz", **used)
    if job.export:
        # The device-trained model: the tables read back, the GPU's MLPs.
        export_model(cfg, final, run.gpu.model, job.export)
    with open(out_path, "w") as f:
        json.dump(record.to_dict(), f, indent=2)
    assert record.golden_match, "the device diverged from the golden model (see the progress lines)"

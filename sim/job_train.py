"""DLRM training on the simulated device: the job behind ``trainingcxl train``.

Each batch: the device pools the batch's embeddings (``LOOKUP``); the GPU
model runs the MLPs forward and backward on the pooled vectors, charging its
cycle cost while the simulation runs on; it hands the device one delta per bag
(already scaled by the learning rate, see :mod:`trainingcxl.host.dlrm`); the
device applies them (``UPDATE``). Beside it the golden model trains on the
same data: every pooled vector is compared bit for bit, and the tables are read
back through CXL.mem and compared at the first and last batch and every
``check_every`` batches. A float32 reference trains on the same data too.

In relaxed order (``relaxed``, or the configuration's ``relaxed_lookup``)
the lookup of batch ``i+1`` runs while the GPU computes batch ``i``, before
batch ``i``'s update; ``FINISH`` completes it after the update
(docs/relaxed-lookup.md). The checks are the same, so the run proves the
relaxed order bit-identical to the strict one.

Arguments (from the runner): ``seed``, ``batches``, ``batch_size``, ``data``
(``"synthetic"`` or a Criteo-format path), ``on_bad_lines``, ``check_every``,
``relaxed``, ``dump`` (a folder) and ``out`` (the JSON record).
"""

import json
import sys
import time
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import Timer

from trainingcxl.hdl.common.descriptor import ErrorCode
from trainingcxl.host.criteo import CriteoDataset
from trainingcxl.host.data import SyntheticWorkload, initial_tables
from trainingcxl.host.dlrm import DenseModel, FixedPointTrainer, FloatTrainer, embedding_deltas
from trainingcxl.host.fixed import from_fixed
from trainingcxl.host.gpu import step_cost
from .device_tb import PERIOD_NS, DeviceTB, bench_args, bench_config


def progress(text):
    print(text, file=sys.stderr, flush=True)


def dataset(cfg, args):
    data = args.get("data", "synthetic")
    if data == "synthetic":
        return SyntheticWorkload(cfg, seed=args.get("seed", 0), batch_size=args["batch_size"])
    return CriteoDataset(cfg, data, batch_size=args["batch_size"],
                         on_error=args.get("on_bad_lines", "raise"))


class Gpu:
    """The GPU: runs the dense model on the pooled vectors the device produced."""

    def __init__(self, cfg, seed):
        self.cfg = cfg
        self.model = DenseModel(cfg, seed)

    def step(self, batch, pooled):
        cfg = self.cfg
        x = from_fixed(pooled, cfg.fixed.frac_bits).astype(np.float32)
        logits, cache = self.model.forward(batch.dense, x.reshape(batch.batch_size, cfg.n_tables, cfg.dim))
        loss = self.model.loss(logits, batch.labels)
        grads, d_pooled = self.model.backward(cache, logits, batch.labels)
        self.model.sgd(grads, cfg.model.lr)
        return loss, embedding_deltas(cfg, d_pooled)


@cocotb.test()
async def train_job(dut):
    args = bench_args()
    cfg = bench_config()
    seed = args.get("seed", 0)
    n = args.get("batches", 50)
    check_every = args.get("check_every", 10)
    data = dataset(cfg, args)
    tb = DeviceTB(dut, cfg, seed=seed, protocol_checks=False)
    await tb.reset()
    await tb.check_identity()

    tables = initial_tables(cfg, seed=seed)
    await tb.load_tables(tables)
    golden = FixedPointTrainer(cfg, tables, seed=seed)
    reference = FloatTrainer(cfg, tables, seed=seed)
    gpu = Gpu(cfg, seed)
    gpu_cycles = step_cost(cfg, args["batch_size"]).cycles

    record = {"batches": n, "loss": [], "loss_ref": [], "cycles_per_batch": [], "checks": [],
              "gpu_cycles_per_batch": gpu_cycles, "errors": [], "pooled_mismatches": 0}
    used = {}
    wall0 = time.perf_counter()
    start = await tb.counters()
    relaxed = bool(args.get("relaxed", cfg.relaxed_lookup))
    record["relaxed"] = relaxed
    record["fallbacks"] = 0
    early = None                    # batch i's relaxed lookup, finished after update i-1
    batch = data.batch(0)
    c0 = await tb.cycles()
    for i in range(n):
        if early is None:
            looked = await tb.lookup(i, batch.indices, batch.offsets)
        else:
            looked = early
        want = golden.step(batch)
        loss_ref = reference.step(batch).loss
        same = looked.error == ErrorCode.NONE and np.array_equal(looked.pooled, want.pooled)
        record["pooled_mismatches"] += int(not same)
        loss, deltas = gpu.step(batch, looked.pooled)
        nxt = data.batch(i + 1) if i + 1 < n else None
        if relaxed and nxt is not None:
            # The next batch's lookup runs while the GPU computes this one.
            task = cocotb.start_soon(tb.lookup(i + 1, nxt.indices, nxt.offsets, relaxed=True))
            await Timer(gpu_cycles * PERIOD_NS, "ns")
            early = await task
        else:
            await Timer(gpu_cycles * PERIOD_NS, "ns")      # the GPU computes; the device idles
            early = None
        error, _ = await tb.update(i, batch.indices, batch.offsets, deltas)
        if early is not None:
            if early.error == ErrorCode.DEFER_OVERFLOW:
                record["fallbacks"] += 1                   # too many shared rows: strict order
                early = None
            else:
                fin, _ = await tb.finish(i + 1, nxt.n_bags)
                early.pooled = tb.pooled(i + 1, nxt.n_bags)
                if fin != ErrorCode.NONE:
                    early.error = fin
        c1 = await tb.cycles()
        record["cycles_per_batch"].append(c1 - c0)
        c0 = c1
        record["loss"].append(loss)
        record["loss_ref"].append(loss_ref)
        if looked.error != ErrorCode.NONE or error != ErrorCode.NONE:
            record["errors"].append({"batch": i, "lookup": looked.error.name, "update": error.name})
        if "dump" in args:
            used[f"indices_{i}"], used[f"offsets_{i}"] = batch.indices, batch.offsets
            used[f"dense_{i}"], used[f"labels_{i}"] = batch.dense, batch.labels
        note = ""
        if i == 0 or i == n - 1 or (i + 1) % check_every == 0:
            device = await tb.read_tables()
            ok = all(np.array_equal(d, g) for d, g in zip(device, golden.tables))
            record["checks"].append({"batch": i, "tables_match": ok})
            note = f", tables {'match' if ok else 'DIFFER'}"
        progress(f"  batch {i + 1}/{n}: loss {loss:.4f} (float32 {loss_ref:.4f}), "
                 f"{record['cycles_per_batch'][-1]} cycles, pooled {'ok' if same else 'DIFFER'}{note}")
        batch = nxt
    end = await tb.counters()

    record.update({
        "final_loss": float(np.mean(record["loss"][-min(10, n):])),
        "final_loss_ref": float(np.mean(record["loss_ref"][-min(10, n):])),
        "cycles": int(sum(record["cycles_per_batch"])),
        "counters": {k: end[k] - start[k] for k in end},
        "golden_match": (record["pooled_mismatches"] == 0 and not record["errors"]
                         and all(c["tables_match"] for c in record["checks"])),
        "wall_s": time.perf_counter() - wall0,
    })
    if getattr(data, "skipped", 0):
        record["skipped_lines"] = data.skipped
    if "dump" in args:
        out = Path(args["dump"])
        out.mkdir(parents=True, exist_ok=True)
        final = await tb.read_tables()
        np.savez(out / "tables.npz", **{f"table{t}": x for t, x in enumerate(final)})
        mlp = {}
        for part, layers in (("bottom", gpu.model.bottom), ("top", gpu.model.top)):
            for k, (w, b) in enumerate(layers):
                mlp[f"{part}_w{k}"], mlp[f"{part}_b{k}"] = w, b
        np.savez(out / "mlp.npz", **mlp)
        np.savez(out / "batches.npz", **used)
    with open(args["out"], "w") as f:
        json.dump(record, f, indent=2)
    assert record["golden_match"], "the device diverged from the golden model (see the progress lines)"

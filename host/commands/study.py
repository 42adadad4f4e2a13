"""``trainingcxl study``: what relaxed recovery costs in accuracy, measured on held-out data.

TrainingCXL recovers the embedding tables exactly (the undo log brings them to
the newest commit D) and lets the MLP snapshot lag: after a failure the MLP
comes from batch m, at most K batches before D (docs/checkpointing.md). CPR
(Maeng et al., MLSys 2021) relaxes the other side: the MLPs stay current and
the tables come back from an older checkpoint. Both trade
accuracy for cheaper checkpoints; this study measures the trade: the same
workload trained with power failures at a fixed rate, for each K and each
mode, against the same run without failures, on the final test AUC and log
loss, over several seeds.

The runs are long (thousands of batches, so that K = 256 matters), too long
for the RTL. They train the golden model, which the device matches bit for
bit, and recover as the host's reference recovery does
(:class:`~trainingcxl.host.model.history.GoldenHistory`: the tables rolled
back to the batch a recovery reports, the MLP of the snapshot it reports). A
sample of RTL runs with failures (``--rtl-sample``) checks that: each is
replayed on the golden model with the recoveries the device reported, and
the replay must end with the device's tables and MLP, bit for bit.

A failure strikes during batch ``b`` after a number of batches drawn from a
geometric distribution of mean ``--failure-every`` (a fixed rate per batch
trained). Then ``D = b - 1`` and, each mode at the worst case the bound K
allows (so that the two are compared at the same staleness):

* ``trainingcxl``: the tables after D; the MLPs after ``max(0, D - K)``, the
  oldest snapshot the bound allows; training resumes at D + 1;
* ``cpr``: the MLPs after D; the tables after ``max(0, D - K)``, as a
  checkpoint taken at most K batches before; training goes on at D + 1 with
  them.

The lookup order does not enter: relaxed lookup is bit-identical to strict
(docs/relaxed-lookup.md), which the RTL sample checks in both orders.
"""

import tempfile
import time
from pathlib import Path

import numpy as np

from . import report
from .options import (config_option, devices_option, json_option, pmem_dir_option,
                      workload_options)
from trainingcxl.host.model.evaluate import evaluate
from trainingcxl.host.model.partial import CPR_FRACTION, CPR_PLS
from .study_runs import (StudyPoint, history_at_start, result, run_points, step,
                         workload as workload_of)
from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.jobs import TrainJob
from trainingcxl.host.tools.argtypes import nonneg, positive, save_figure, share
from trainingcxl.host.runs.cluster import LocalPool
from trainingcxl.host.runs.fanout import Progress
from trainingcxl.host.runs.runners import DeviceRunner
from trainingcxl.host.runs.task import Task

__all__ = ["MODES", "STUDY_K", "golden_run", "replay", "recover", "register"]

MODES = ("trainingcxl", "cpr")
STUDY_K = (0, 1, 8, 64, 256)


def recover(history, d, m):
    """Roll the tables back to their state after batch ``d`` and load the MLPs after ``m``:
    the host's reference recovery (what the device restores, and the host resumes from)."""
    golden_mlp, reference_mlp = history.mlp(m)
    history.rollback(d)
    history.golden.dense.load_parameters(golden_mlp)
    history.reference.dense.load_parameters(reference_mlp)


def golden_run(cfg, workload, batches, *, seed, mode="trainingcxl", k=0, failure_every=0):
    """Train ``batches`` batches of ``workload`` on the golden model with failures at a rate
    of one per ``failure_every`` batches (0: none), recovering as ``mode`` does with bound
    ``k``; returns ``(history, recoveries)``, one ``(batch, tables_at, mlp_at)`` a failure."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    history = history_at_start(cfg, seed)
    live = (history.golden.tables, history.reference.tables)
    # cpr's table checkpoints, by batch: what a checkpoint after that batch holds (one
    # taken before a recovery stays what it was).
    saved = {0: [[t.copy() for t in tables] for tables in live]}
    rng = np.random.default_rng([seed, 0xFA11])

    def gap():
        return int(rng.geometric(1 / failure_every)) if failure_every else None

    left, recoveries = gap(), []
    while history.head < batches:
        if left == 0:
            d = history.head                # the failure strikes during batch d + 1
            if mode == "trainingcxl":
                tables_at, mlp_at = d, max(0, d - k)
                recover(history, tables_at, mlp_at)
            else:
                tables_at, mlp_at = max(0, d - k), d
                for tables, copy in zip(live, saved[tables_at]):
                    for t, x in zip(tables, copy):
                        t[...] = x
                history.restart_at(d)       # older tables with the MLPs of d
            recoveries.append((d + 1, tables_at, mlp_at))
            left = gap()
            continue
        step(history, workload, k + 2)
        if mode == "cpr":
            saved[history.head] = [[t.copy() for t in tables] for tables in live]
            saved.pop(history.head - k - 1, None)
        if left is not None:
            left -= 1
    return history, recoveries


def replay(cfg, workload, batches, *, seed, recoveries):
    """Train on the golden model, recovering at each ``(tables_at, mlp_at)`` of ``recoveries``
    in turn (what a device reported), and end after batch ``batches``; returns the history."""
    history = history_at_start(cfg, seed)
    for d, m in recoveries:
        while history.head < d:
            step(history, workload)        # every state kept: m may be old
        recover(history, d, m)
    while history.head < batches:
        step(history, workload)
    return history


# -- the study's points ---------------------------------------------------------------------

def study_point(point):
    """One run of the study (in its own process): final test metrics of the device model and
    of the float32 reference."""
    cfg = point.config
    workload = workload_of(cfg, point.seed, point.batch_size)
    t0 = time.monotonic()
    history, recoveries = golden_run(cfg, workload, point.batches, seed=point.seed,
                                     mode=point.mode, k=point.k,
                                     failure_every=point.failure_every)
    test = workload.test_set(point.test_samples)
    g, r = history.golden, history.reference
    return {"mode": point.mode, "k": point.k, "seed": point.seed,
            "failure_every": point.failure_every,
            "failures": len(recoveries),
            "staleness": [b - 1 - min(t, m) for b, t, m in recoveries],
            "device": evaluate(cfg, g.tables, g.dense, test).to_dict(),
            "reference": evaluate(cfg, r.tables, r.dense, test).to_dict(),
            "wall_s": time.monotonic() - t0}


def _rtl_point(task):
    """One RTL run with failures, replayed on the golden model: ``(task, outcome dict)``."""
    cfg, a = task.config, task.job
    with tempfile.TemporaryDirectory(prefix="trainingcxl-study-") as tmp:
        _, rec, error = DeviceRunner()(task.with_job(dump=tmp))
        if rec is None or error:
            return task, {"error": (error or "no record")[-400:]}
        tables = np.load(Path(tmp) / "tables.npz")
        mlp = np.load(Path(tmp) / "mlp.npz")
        recs = [(f.recovered_batch, f.recovered_mlp_batch) for f in rec.failures]
        history = replay(cfg, workload_of(cfg, a.seed, a.batch_size), rec.stopped_after,
                         seed=a.seed, recoveries=recs)
        g = history.golden
        same_tables = all(np.array_equal(tables[f"table{t}"], x) for t, x in enumerate(g.tables))
        same_mlp = all(np.array_equal(mlp[f"{part}_{kind}{i}"].view(np.uint32),
                                      layer[j].view(np.uint32))
                       for part, layers in (("bottom", g.dense.bottom), ("top", g.dense.top))
                       for i, layer in enumerate(layers) for j, kind in enumerate("wb"))
    return task, {"staleness": a.staleness, "relaxed": a.relaxed,
                  "batches": rec.stopped_after, "recoveries": recs,
                  "consistent": rec.consistent, "tables_equal": same_tables,
                  "mlp_equal": same_mlp}


def rtl_tasks(count, seed, pmem_dir=None):
    """``count`` RTL runs on ``tiny``: K of 0, 1, 8 in strict and relaxed order, in turn,
    with three random failures each."""
    out = []
    for i in range(count):
        k, relaxed = (0, 1, 8)[i % 3], bool(i // 3 % 2)
        job = TrainJob(seed=seed + i, batches=12, batch_size=8, check_every=4, relaxed=relaxed,
                       staleness=k, failures=({"random": True},) * 3,
                       failure_seed=seed + i, extend=True, test_samples=0)
        out.append(Task(f"study-rtl{i}", PRESETS["tiny"], job, media_dir=pmem_dir))
    return out


def _summary(points, modes, ks):
    """Per mode and K: mean and spread (standard deviation over seeds) of the change in test
    AUC and log loss against the run without failures of the same seed."""
    base = {p["seed"]: p for p in points if p["failure_every"] == 0}
    rows = []
    for mode in modes:
        for k in ks:
            mine = [p for p in points if p["failure_every"] and p["mode"] == mode and p["k"] == k]
            d_auc = [p["device"]["auc"] - base[p["seed"]]["device"]["auc"] for p in mine]
            rel = [100 * x / base[p["seed"]]["device"]["auc"] for x, p in zip(d_auc, mine)]
            d_ll = [p["device"]["log_loss"] - base[p["seed"]]["device"]["log_loss"] for p in mine]
            rows.append({"mode": mode, "k": k, "seeds": len(mine),
                         "failures": float(np.mean([p["failures"] for p in mine])),
                         "auc": float(np.mean([p["device"]["auc"] for p in mine])),
                         "d_auc": float(np.mean(d_auc)), "d_auc_std": float(np.std(d_auc)),
                         "d_auc_pct": float(np.mean(rel)), "d_auc_pct_std": float(np.std(rel)),
                         "d_log_loss": float(np.mean(d_ll)), "d_log_loss_std": float(np.std(d_ll)),
                         "exact": all(p["device"] == base[p["seed"]]["device"] for p in mine)})
    return rows


def _plot(summary, baseline_auc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for mode, style in zip(MODES, ("o-", "s--")):
        rows = [r for r in summary if r["mode"] == mode]
        if not rows:
            continue
        ks = [r["k"] for r in rows]
        axes[0].errorbar(ks, [r["d_auc_pct"] for r in rows], yerr=[r["d_auc_pct_std"] for r in rows],
                         fmt=style, capsize=3, label=mode)
        axes[1].errorbar(ks, [r["d_log_loss"] for r in rows],
                         yerr=[r["d_log_loss_std"] for r in rows], fmt=style, capsize=3, label=mode)
    axes[0].axhspan(-0.01, 0.01, color="green", alpha=0.15, label="within 0.01%")
    for ax, what in zip(axes, ("test AUC change against no failures (%)",
                               "test log loss change against no failures")):
        ax.set_xscale("symlog", linthresh=1)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xlabel("K (batches the MLPs, or the tables, lag after a recovery)")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"trainingcxl study: cost of relaxed recovery (test AUC without failures "
                 f"{baseline_auc:.4f})")
    fig.tight_layout()
    save_figure(fig, path)


def cmd_study(args):
    cfg = args.config or PRESETS["small"]
    if args.devices is not None and args.devices > 1:
        from .study_pool import cmd_pool_study
        return cmd_pool_study(args, cfg)
    if len(args.failure_every) != 1:
        raise SystemExit("error: --failure-every takes one rate without --devices")
    args.failure_every = args.failure_every[0]
    try:
        ks = [int(x) for x in args.k.split(",")]
    except ValueError:
        raise SystemExit(f"error: --k takes comma-separated integers, not {args.k!r}") from None
    modes = (args.modes or ",".join(MODES)).split(",")
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"error: unknown mode {m!r}; the modes are {', '.join(MODES)}")
    if any(k < 0 for k in ks):
        raise SystemExit("error: K must not be negative")
    batch_size = args.batch_size or cfg.model.batch_size
    if batch_size * cfg.n_tables > cfg.max_bags:
        raise SystemExit(f"error: --batch-size {batch_size} x {cfg.n_tables} tables exceeds "
                         f"the configuration's max_bags ({cfg.max_bags})")
    try:        # a test set with one label has no AUC: say so before the runs
        workload_of(cfg, args.seed, batch_size).test_set(args.test_samples).check_labels()
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    specs = []
    for seed in range(args.seed, args.seed + args.seeds):
        base = StudyPoint(cfg, seed, "trainingcxl", 0, args.batches, batch_size, args.test_samples)
        specs.append(base)
        specs += [base.replace(mode=mode, k=k, failure_every=args.failure_every)
                  for mode in modes for k in ks]
    print(f"trainingcxl study: {len(specs)} golden-model runs of {args.batches} batches of "
          f"{batch_size} ({cfg.n_tables} tables, {sum(cfg.tables):,} rows), a failure every "
          f"{args.failure_every} batches on average, K in {ks}, modes {', '.join(modes)}, "
          f"{args.seeds} seeds; then {args.rtl_sample} RTL runs replayed", flush=True)
    t0 = time.monotonic()
    points = run_points(study_point, specs, args.jobs)
    pool = LocalPool(args.jobs)
    points.sort(key=lambda p: (p["seed"], p["failure_every"] > 0, p["mode"], p["k"]))
    summary = _summary(points, modes, ks)
    rtl = []
    if args.rtl_sample:
        specs = rtl_tasks(args.rtl_sample, args.seed, args.pmem_dir)
        pool.prebuild([PRESETS["tiny"]])
        bar = Progress(len(specs), "RTL runs")
        for _, outcome in pool.run(_rtl_point, specs):
            rtl.append(result(outcome)[1])
            bar.step()
    agree = [r for r in rtl if r.get("tables_equal") and r.get("mlp_equal") and r["consistent"]]
    baseline = float(np.mean([p["device"]["auc"] for p in points if p["failure_every"] == 0]))
    base_ll = float(np.mean([p["device"]["log_loss"] for p in points if p["failure_every"] == 0]))
    print(f"\n  without failures   test AUC {baseline:.4f}, log loss {base_ll:.4f} "
          f"(mean of {args.seeds} seeds, {points[0]['device']['samples']:,} held-out samples)")
    print("  mode          K  failures   test AUC   change (%)            log loss change     "
          "bit-identical")
    for r in summary:
        print(f"  {r['mode']:<11} {r['k']:>3} {r['failures']:>9.1f} {r['auc']:>10.4f}  "
              f"{r['d_auc_pct']:>+8.4f} +- {r['d_auc_pct_std']:.4f}  "
              f"{r['d_log_loss']:>+9.5f} +- {r['d_log_loss_std']:.5f}  "
              f"{'yes' if r['exact'] else 'no'}")
    within = [r for r in summary if abs(r["d_auc_pct"]) <= 0.01]
    if rtl:
        ran = [r for r in rtl if "error" not in r]
        kinds = ", ".join(sorted({f"K={r['staleness']} {'relaxed' if r['relaxed'] else 'strict'}"
                                  for r in ran}))
        print(f"  RTL sample         {len(agree)} of {len(rtl)} runs "
              f"({sum(len(r['recoveries']) for r in ran)} recoveries; {kinds}) replayed on the "
              f"golden model: tables and MLP bit for bit "
              f"{'equal' if len(agree) == len(rtl) else 'NOT equal'}")
        for r in rtl:
            if "error" in r:
                print(f"  RTL run failed     {r['error']}")
    names = ", ".join(f"{r['mode']} K={r['k']}" for r in within) or "none"
    print(f"  within 0.01% AUC   {names}")
    print(f"  wall time          {time.monotonic() - t0:.0f} s")
    record = {"config": cfg.to_dict(), "batches": args.batches, "batch_size": batch_size,
              "failure_every": args.failure_every, "seeds": args.seeds, "k": ks, "modes": modes,
              "baseline_auc": baseline, "baseline_log_loss": base_ll,
              "points": points, "summary": summary, "rtl_sample": rtl}
    if args.plot:
        _plot(summary, baseline, args.plot)
        print(f"  plot               {args.plot}")
    report.json_out(args.json, record, args=args)
    return 0 if len(agree) == len(rtl) else 1


def _rates(text):
    import argparse
    try:
        rates = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected N or N,N...") from None
    if not rates or min(rates) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: rates are positive batch counts")
    return rates


def register(sub):
    sp = sub.add_parser(
        "study", help="what relaxed recovery costs in test accuracy (golden model, RTL sample)",
        description="Trains the same synthetic workload with power failures at a fixed rate "
                    "for each staleness bound K and recovery mode (trainingcxl: exact tables, "
                    "the MLPs K batches old; cpr: current MLPs, the tables K batches old), and "
                    "without failures, over several seeds, on the "
                    "golden model with the host's reference recovery; reports the final test "
                    "AUC and log loss against the run without failures. A sample of RTL runs "
                    "with failures is replayed on the golden model and must agree bit for bit.")
    config_option(sp, "small")
    workload_options(sp, defaults={"batches": 2000}, helps={"batches": "batches a run trains",
                                                             "seed": "first seed"})
    sp.add_argument("--failure-every", type=_rates, default=[100], metavar="N[,N...]",
                    help="a power failure every N batches trained, on average (with --devices, "
                         "one or more rates)")
    sp.add_argument("--k", default=",".join(map(str, STUDY_K)),
                    help="staleness bounds")
    sp.add_argument("--modes", default=None,
                    help=f"recovery modes (default: {','.join(MODES)}; with --devices: "
                         f"exact,cpr,cpr-mfu,cpr-ssu)")
    devices_option(sp, more="a failure strikes one device, and TrainingCXL's exact recovery "
                            "of the pool (every device back to the pool's durable batch) is set "
                            "against CPR's partial recovery (only the failed device's tables back "
                            "to their checkpoint; plain, MFU and SSU), on test AUC and modelled "
                            "checkpoint overhead")
    sp.add_argument("--pls", type=float, default=CPR_PLS,
                    help="with --devices: CPR's target portion of lost samples, which sets its "
                         "checkpoint interval to 2 x PLS x the failure interval")
    sp.add_argument("--fraction", type=share, default=CPR_FRACTION, metavar="F",
                    help="with --devices: the share of a device's rows CPR-MFU and CPR-SSU "
                         "save each time, every that share of the interval")
    sp.add_argument("--seeds", type=positive, default=3, help="seeds per point")
    sp.add_argument("--test-samples", type=positive, default=4096,
                    help="held-out samples")
    sp.add_argument("--rtl-sample", type=nonneg, default=6,
                    help="RTL runs with failures to replay on the golden model (default: 6; "
                         "0: none)")
    sp.add_argument("--device-batches", type=nonneg, default=0, metavar="N",
                    help="with --devices: also train N batches of every mode at every rate on "
                         "the pool's simulated devices, with the same failures, and measure "
                         "the overhead in cycles against a run without checkpoints or failures "
                         "(0: not)")
    sp.add_argument("--jobs", type=positive, default=2,
                    help="processes (with --device-batches, simulators at once)")
    pmem_dir_option(sp)
    json_option(sp, help="write every point and the summary to OUT")
    sp.add_argument("--plot", metavar="OUT.png", help="draw the change in test AUC and log "
                                                      "loss against K, per mode")
    sp.set_defaults(func=cmd_study)

"""``trainingcxl study --devices N``: exact recovery of a pool against CPR's partial recovery.

The pool's tables are spread over N devices (:mod:`trainingcxl.spec.pool`) and a
failure strikes one device, at a fixed rate per batch. Each mode trains the same
workload on the golden model (which the devices match bit for bit) and recovers as
it would:

* ``exact`` (TrainingCXL): every device rolls back to the pool's durable batch, the
  batch before the one the failure cut (K = 0), and that batch is trained again: the
  model ends bit for bit as without failures (checked);
* ``cpr``, ``cpr-mfu``, ``cpr-ssu`` (:mod:`trainingcxl.host.model.partial`): the failed
  device's tables go back to their checkpoint, the other devices and the MLPs go on.

Accuracy is the final test AUC and log loss against the run without failures of the
same seed. Overhead is modelled at the media's rates, per device in parallel, over a
batch that costs the PMEM bound of its rows plus the GPU step
(:mod:`trainingcxl.host.model.bound`): ``exact`` pays its undo records, commit record
and MLP snapshot every batch and half a batch trained again per failure; the CPR
modes pay their checkpoint writes (the rows they save and the MLP once an interval)
and the failed device's reload. CPR wrote its checkpoints to remote storage; here
they go to each device's PMEM, which favours CPR.
"""

import hashlib
import time

import numpy as np

from trainingcxl.host.model.bound import batch_bound
from trainingcxl.host.model.evaluate import evaluate
from trainingcxl.host.model.gpu import step_cost
from trainingcxl.host.model.partial import (CPR_FRACTION, CPR_PLS, CPR_VARIANTS,
                                             PartialCheckpoints, check_cpr_settings,
                                             cpr_interval, failure_schedule)
from trainingcxl.host.model.shard import shard_batch
from trainingcxl.spec.pool import shards
from .options import with_devices
from .study_runs import StudyPoint, history_at_start, run_points, step, workload as workload_of

__all__ = ["POOL_MODES", "pool_golden_run", "pool_point", "batch_costs", "cmd_pool_study"]

POOL_MODES = ("exact", *CPR_VARIANTS)

#: CPR's figures on Criteo Kaggle (Maeng et al., MLSys 2021): checkpoint-related
#: overhead of full recovery and of CPR-MFU/SSU, in percent of training time.
CPR_PUBLISHED = {"full recovery": (8.2, 8.5), "cpr-mfu/ssu": (0.53, 0.68)}


def pool_golden_run(cfg, workload, batches, *, seed, mode, failure_every, pls=CPR_PLS,
                    fraction=CPR_FRACTION):
    """Train ``batches`` batches of ``workload`` on ``cfg``'s pool with a failure of one
    device every ``failure_every`` batches on average (0: none), recovering as ``mode``
    does; returns ``(history, failures, checkpoints, losses)``: ``failures`` a list of
    ``(batch, device, batches since that device's tables were saved)``, ``checkpoints``
    the golden model's CPR checkpoints of each device (``None`` for ``exact``), ``losses``
    the golden model's loss of each batch in order (what the devices' GPUs report,
    :mod:`~trainingcxl.host.protocol.cpr`)."""
    if mode not in POOL_MODES:
        raise ValueError(f"mode must be one of {', '.join(POOL_MODES)}, not {mode!r}")
    plan = shards(cfg)
    history = history_at_start(cfg, seed)
    cps = None
    if mode != "exact":
        # Each device checkpoints its pieces as the devices do (views of the models'
        # tables), the golden model's and the reference's alike.
        interval = cpr_interval(pls, failure_every) if failure_every else batches
        cps = [[PartialCheckpoints(s.config, [trainer.tables[t][lo:hi]
                                              for t, (lo, hi) in zip(s.tables, s.ranges)],
                                   mode, interval, fraction=fraction, seed=seed)
                for trainer in (history.golden, history.reference)] for s in plan]
    failures, losses = [], []
    for d, device in [*failure_schedule(len(plan), batches, failure_every, seed), (batches, None)]:
        while history.head < d:
            losses.append(step(history, workload, 2).loss)
            if cps is not None:
                batch = workload.batch(history.head - 1)
                for s, mine in zip(plan, cps):
                    for c in mine:
                        c.after_batch(history.head, shard_batch(batch, s.tables, s.ranges))
        if device is None:
            break
        if cps is None:                     # exact: back to d, batch d + 1 is trained again
            failures.append((d + 1, device, 0))
        else:
            for c in cps[device]:
                c.restore(range(len(c.tables)))
            failures.append((d + 1, device, d % cps[0][0].every))
            history.restart_at(d)           # its tables older, the rest as they are
    if cps is not None:
        cps = [golden for golden, _ in cps]
    return history, failures, cps, losses


def _write(pmem, lines):
    """Cycles of writing ``lines`` media lines at the media's write rate."""
    num, den = pmem.write_rate
    return lines * den / num


def _read(pmem, lines):
    num, den = pmem.read_rate
    return lines * den / num


def batch_costs(cfg, workload, batches=8):
    """Modelled cycles of a pool batch, the mean over ``batches`` of the workload: its
    training (the slowest device's PMEM bound of its rows, read and written once, plus
    the GPU step) and the checkpointing ``exact`` adds (undo records, commit record and
    the MLP snapshot every batch, on the slowest device)."""
    plan = shards(cfg)
    train, ckpt = [], []
    for i in range(batches):
        b = workload.batch(i)
        bounds = [batch_bound(s.config, shard_batch(b, s.tables, s.ranges), staleness=0)
                  for s in plan]
        plain = [_write(s.config.pmem, bd.rows * s.config.lines_per_row)
                 for s, bd in zip(plan, bounds)]
        plain = [max(p, bd.read_cycles) for p, bd in zip(plain, bounds)]
        train.append(max(plain))
        ckpt.append(max(bd.cycles for bd in bounds) - max(plain))
    gpu = step_cost(cfg, workload.batch_size).cycles
    return float(np.mean(train)) + gpu, float(np.mean(ckpt))


def overhead(cfg, mode, batches, failures, cps, costs):
    """Modelled checkpoint and recovery cycles of a run, as a share of its training cycles."""
    plan = shards(cfg)
    t_batch, ckpt = costs
    pmem = cfg.pmem
    if mode == "exact":
        extra = batches * ckpt + len(failures) * (t_batch / 2)
    else:
        lpr, n = cfg.lines_per_row, len(plan)
        saves = batches // cps[0].every
        rows = sum(c.rows_saved for c in cps) / n   # the devices write in parallel
        mlp = saves / (1 if mode == "cpr" else round(1 / cps[0].fraction)) * (cfg.mlp_lines + 1)
        reload = np.mean([sum(s.config.tables) for s in plan]) * lpr
        extra = _write(pmem, rows * lpr + mlp) + len(failures) * _read(pmem, reload)
    return 100 * extra / (batches * t_batch)


def pool_point(point):
    """One run of the pool study (its own process): final test metrics, failures and
    modelled overhead."""
    cfg = point.config
    workload = workload_of(cfg, point.seed, point.batch_size)
    t0 = time.monotonic()
    history, failures, cps, _ = pool_golden_run(
        cfg, workload, point.batches, seed=point.seed, mode=point.mode,
        failure_every=point.failure_every, pls=point.pls, fraction=point.fraction)
    test = workload.test_set(point.test_samples)
    g = history.golden
    costs = batch_costs(cfg, workload)
    return {"mode": point.mode, "seed": point.seed, "failure_every": point.failure_every,
            "failures": len(failures),
            "interval": None if cps is None else cps[0].every,
            "lost_batches": sum(f[2] for f in failures),
            "overhead_pct": overhead(cfg, point.mode, point.batches, failures, cps, costs),
            "batch_cycles": costs[0],
            "device": evaluate(cfg, g.tables, g.dense, test).to_dict(),
            "model_digest": hashlib.sha256(b"".join(t.tobytes() for t in g.tables)
                                           + g.dense.parameters().tobytes()).hexdigest(),
            "wall_s": time.monotonic() - t0}


def rtl_jobs(cfg, modes, rates, *, batches, batch_size, seed, pls, fraction):
    """The study's runs on the simulated devices of the pool: ``(name, rate, TrainJob)``,
    first a run without checkpoints or failures, then each mode at each rate with the
    golden model's failures (:func:`~trainingcxl.host.model.partial.failure_schedule`).
    ``exact`` trains in strict order with K = 0 and its device loses power in the middle
    of the GPU step of the batch after the failure's (it is trained again, as in
    :func:`pool_golden_run`); the CPR modes run :mod:`trainingcxl.host.protocol.cpr`."""
    from trainingcxl.host.jobs import CAMPAIGN_SYSTEM, TrainJob
    n = len(shards(cfg))
    base = TrainJob(seed=seed, batches=batches, batch_size=batch_size, system=CAMPAIGN_SYSTEM,
                    relaxed=False, staleness=0, quiet=True, test_samples=0, check_every=batches)
    out = [("none", 0, base.replace(checkpointing=False))]
    mid_gpu = step_cost(cfg, batch_size).cycles // 2
    for rate in rates:
        for mode in modes:
            if mode == "exact":
                plan = tuple({"pool_batch": d + 1, "offset": mid_gpu, "devices": [x]}
                             for d, x in failure_schedule(n, batches, rate, seed))
                job = base.replace(failures=plan, extend=bool(plan))
            else:
                job = base.replace(recovery=mode, failure_every=rate, pls=pls, fraction=fraction)
            out.append((mode, rate, job))
    return out


def rtl_measure(cfg, jobs, *, workers=None, log=print):
    """Run ``jobs`` (:func:`rtl_jobs`) on the pool's simulated devices, one after the
    other; returns a row each: cycles, overhead against the first run, failures, and
    whether the run matched its golden model bit for bit."""
    from trainingcxl.host.runs.pool_coordinator import run_pool
    rows = []
    for name, rate, job in jobs:
        job = job.validated(cfg)
        t0 = time.monotonic()
        rec = run_pool(job, cfg, workers=workers)
        row = {"mode": name, "failure_every": rate, "cycles": rec.cycles,
               "failures": len(rec.failures if rec.cpr_failures is None else rec.cpr_failures),
               "golden_match": rec.golden_match, "wall_s": time.monotonic() - t0}
        if rec.cpr is not None:
            row["cpr"] = rec.cpr.to_dict()
        rows.append(row)
        row["overhead_pct"] = 100 * (row["cycles"] / rows[0]["cycles"] - 1)
        log(f"  [devices] {name:<8} failure every {rate or '-':>4}: {row['cycles']:>10,} cycles "
            f"({row['overhead_pct']:+.1f}%), {row['failures']} failures, "
            f"{'bit-exact' if row['golden_match'] else 'NOT bit-exact'}, {row['wall_s']:.0f} s")
    return rows


def _summary(points, modes, rates):
    """Per mode and failure rate: the change in test AUC and log loss against the run
    without failures of the same seed (mean and spread over seeds), and the overhead."""
    base = {p["seed"]: p for p in points if p["failure_every"] == 0}
    rows = []
    for rate in rates:
        for mode in modes:
            mine = [p for p in points if p["failure_every"] == rate and p["mode"] == mode]
            d_auc = [100 * (p["device"]["auc"] - base[p["seed"]]["device"]["auc"])
                     / base[p["seed"]]["device"]["auc"] for p in mine]
            d_ll = [p["device"]["log_loss"] - base[p["seed"]]["device"]["log_loss"] for p in mine]
            rows.append({
                "mode": mode, "failure_every": rate, "seeds": len(mine),
                "failures": float(np.mean([p["failures"] for p in mine])),
                "interval": mine[0]["interval"],
                "lost_batches": float(np.mean([p["lost_batches"] for p in mine])),
                "auc": float(np.mean([p["device"]["auc"] for p in mine])),
                "d_auc_pct": float(np.mean(d_auc)), "d_auc_pct_std": float(np.std(d_auc)),
                "d_log_loss": float(np.mean(d_ll)), "d_log_loss_std": float(np.std(d_ll)),
                "overhead_pct": float(np.mean([p["overhead_pct"] for p in mine])),
                "bit_identical": all(p["model_digest"] == base[p["seed"]]["model_digest"]
                                     for p in mine)})
    return rows


def _plot(summary, rates, path, measured=()):
    """Test AUC change and modelled overhead per mode and rate; with ``measured`` (the rows
    of :func:`rtl_measure`), the overhead measured on the devices beside them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from trainingcxl.host.tools.argtypes import save_figure
    modes = list(dict.fromkeys(r["mode"] for r in summary))
    fig, axes = plt.subplots(1, 3 if measured else 2, figsize=(18 if measured else 12, 4))
    width = 0.8 / len(rates)
    for i, rate in enumerate(rates):
        rows = [next(r for r in summary if r["mode"] == m and r["failure_every"] == rate)
                for m in modes]
        x = np.arange(len(modes)) + i * width
        axes[0].bar(x, [r["d_auc_pct"] for r in rows], width, yerr=[r["d_auc_pct_std"] for r in rows],
                    capsize=3, label=f"a failure every {rate} batches")
        axes[1].bar(x, [r["overhead_pct"] for r in rows], width,
                    label=f"a failure every {rate} batches")
        if measured:
            mine = {r["mode"]: r["overhead_pct"] for r in measured if r["failure_every"] == rate}
            axes[2].bar(x, [mine.get(m, 0) for m in modes], width,
                        label=f"a failure every {rate} batches")
    for lo, hi, name in ((*CPR_PUBLISHED["full recovery"], "CPR paper: full recovery"),
                         (*CPR_PUBLISHED["cpr-mfu/ssu"], "CPR paper: CPR-MFU/SSU")):
        for ax in axes[1:]:
            ax.axhspan(lo, hi, alpha=0.25, label=name, color="grey" if "full" in name else "green")
    for ax, what in zip(axes, ("test AUC change against no failures (%)",
                               "overhead (% of training, modelled)",
                               "overhead (% of cycles, measured on the devices)")):
        ax.set_xticks(np.arange(len(modes)) + width * (len(rates) - 1) / 2, modes)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_ylabel(what)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    fig.suptitle("study --devices: exact recovery of a pool against CPR's partial recovery")
    fig.tight_layout()
    save_figure(fig, path)


def cmd_pool_study(args, cfg):
    """``study --devices N``."""
    from . import report
    from trainingcxl.spec.config import ConfigError
    cfg = with_devices(cfg, args.devices)
    try:
        plan = shards(cfg)
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None
    modes = (args.modes or ",".join(POOL_MODES)).split(",")
    bad = [m for m in modes if m not in POOL_MODES]
    if bad:
        raise SystemExit(f"error: unknown mode {bad[0]!r}; with --devices the modes are "
                         f"{', '.join(POOL_MODES)}")
    try:
        check_cpr_settings(args.pls, args.fraction)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    batch_size = args.batch_size or cfg.model.batch_size
    try:
        workload_of(cfg, args.seed, batch_size).test_set(args.test_samples).check_labels()
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    rates = args.failure_every
    specs = []
    for seed in range(args.seed, args.seed + args.seeds):
        base = StudyPoint(cfg, seed, "exact", 0, args.batches, batch_size, args.test_samples,
                          pls=args.pls, fraction=args.fraction)
        specs.append(base)
        specs += [base.replace(mode=m, failure_every=r) for r in rates for m in modes]
    print(f"trainingcxl study: a pool of {len(plan)} devices (tables "
          f"{'; '.join(s.label(cfg.tables) for s in plan)}); {len(specs)} golden-model "
          f"runs of {args.batches} batches of {batch_size}, a failure of one device every "
          f"{' or '.join(map(str, rates))} batches on average, modes {', '.join(modes)}, "
          f"{args.seeds} seeds; CPR's target PLS {args.pls}, MFU/SSU save {args.fraction:g} of "
          f"the rows at a time", flush=True)
    t0 = time.monotonic()
    points = run_points(pool_point, specs, args.jobs)
    points.sort(key=lambda p: (p["seed"], p["failure_every"], p["mode"]))
    summary = _summary(points, modes, rates)
    base = [p for p in points if p["failure_every"] == 0]
    baseline = float(np.mean([p["device"]["auc"] for p in base]))
    print(f"\n  without failures   test AUC {baseline:.4f} (mean of {args.seeds} seeds, "
          f"{base[0]['device']['samples']:,} held-out samples); a batch costs "
          f"{base[0]['batch_cycles']:,.0f} cycles (modelled)")
    print("  failures every  mode      failures  interval  since save  test AUC change (%)"
          "     log loss change        overhead  bit-identical")
    for r in summary:
        interval = "-" if r["interval"] is None else str(r["interval"])
        print(f"  {r['failure_every']:>14}  {r['mode']:<8} {r['failures']:>9.1f} {interval:>9} "
              f"{r['lost_batches']:>11.1f}  {r['d_auc_pct']:>+8.4f} +- {r['d_auc_pct_std']:.4f}"
              f"   {r['d_log_loss']:>+9.5f} +- {r['d_log_loss_std']:.5f}  {r['overhead_pct']:>7.2f}%"
              f"  {'yes' if r['bit_identical'] else 'no'}")
    print(f"  CPR's figures      checkpoint overhead {CPR_PUBLISHED['full recovery'][0]}-"
          f"{CPR_PUBLISHED['full recovery'][1]}% with full recovery, "
          f"{CPR_PUBLISHED['cpr-mfu/ssu'][0]}-{CPR_PUBLISHED['cpr-mfu/ssu'][1]}% with CPR-MFU/SSU "
          f"(Criteo Kaggle, a production cluster's failure pattern)")
    print(f"  wall time          {time.monotonic() - t0:.0f} s")
    devices_rows = []
    if args.device_batches:
        print(f"\n  on the devices    {args.device_batches} batches per run, the same failures, "
              f"measured in cycles:", flush=True)
        devices_rows = rtl_measure(cfg, rtl_jobs(cfg, modes, rates, batches=args.device_batches,
                                                 batch_size=batch_size, seed=args.seed,
                                                 pls=args.pls, fraction=args.fraction),
                                   workers=args.jobs)
    record = {"config": cfg.to_dict(), "devices": len(plan), "batches": args.batches,
              "batch_size": batch_size, "failure_every": rates, "seeds": args.seeds,
              "modes": modes, "pls": args.pls, "fraction": args.fraction,
              "baseline_auc": baseline, "cpr_published": CPR_PUBLISHED,
              "points": points, "summary": summary, "on_devices": devices_rows}
    if args.plot:
        _plot(summary, rates, args.plot, devices_rows)
        print(f"  plot               {args.plot}")
    report.json_out(args.json, record, args=args)
    exact = [r for r in summary if r["mode"] == "exact"]
    good = all(r["bit_identical"] for r in exact) and all(r["golden_match"] for r in devices_rows)
    return 0 if good else 1

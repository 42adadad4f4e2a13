"""``trainingcxl bench --pool``: a pool of 1, 2, 4 and 8 devices, strong and weak scaling.

The scale ladder's model (8 tables of dim 16, bags of 16 to 32 rows) trained on
pools of devices (:mod:`trainingcxl.spec.pool`, docs/pool.md), each run with and
without checkpointing:

* strong scaling: the same 8 tables of ``rows`` rows spread over more devices;
* weak scaling: the tables grow with the pool, 8 tables of ``devices x rows`` rows,
  so every device holds the same rows.

Per point: cycles per batch over a steady window (batches 3..N after 2 of
warm-up), samples per simulated second (at the nominal clock) and per wall
second, checkpoint overhead; the switch's latency is stated. With ``workers`` the
largest strong pool also runs with each number of simulators at once: its wall
time per batch, and its cycles, which must not change.
"""

import time

from trainingcxl.spec.config import NOMINAL_CLOCK_MHZ, PoolShape
from trainingcxl.spec.presets import rm_config
from trainingcxl.host.jobs import TrainJob
from trainingcxl.host.tools.argtypes import DOC_FONTS, save_figure
from .bench_scale import MIN_POOLING, WARMUP_BATCHES, publish

__all__ = ["DEVICES", "DEFAULT_BATCHES", "pool_points", "run_pool_bench", "report", "plot",
           "cmd_pool"]

#: Pool sizes measured by default.
DEVICES = (1, 2, 4, 8)
#: Batches of a run: the window is batches 3..10, 8 after 2 of warm-up.
DEFAULT_BATCHES = WARMUP_BATCHES + 8


def pool_points(devices, rows, batch_size):
    """``(scaling, devices, Config)`` of every point."""
    out = []
    for n in devices:
        for scaling, r in (("strong", rows), ("weak", rows * n)):
            if scaling == "weak" and n == 1:
                continue                # the same run as strong at 1 device
            cfg = rm_config(r, batch_size)
            out.append((scaling, n, cfg.replace(pool=PoolShape(devices=n))))
    return out


def _figures(record, batch_size, first):
    per = record.losses("cycles_per_batch")[first - 1:]
    cycles = sum(per) / len(per)
    batches = len(record.cycles_per_batch)
    return {"cycles_per_batch": cycles,
            "samples_per_sim_s": batch_size * NOMINAL_CLOCK_MHZ * 1e6 / cycles,
            "samples_per_wall_s": batch_size * batches / record.pool.wall_s,
            "wall_s_per_batch": record.pool.wall_s / batches}


def run_pool_bench(args, say):
    """Every point with and without checkpointing; returns the JSON-ready result."""
    from trainingcxl.host.runs.cluster import open_cluster
    from trainingcxl.host.runs.pool_coordinator import run_pool
    first = WARMUP_BATCHES + 1
    cluster = None if args.cluster == "local" else open_cluster(args.cluster, args.jobs)
    rows = []
    t0 = time.monotonic()

    def one(cfg, checkpointing, workers):
        job = TrainJob(batches=args.batches, batch_size=args.pool_batch, seed=args.seed,
                       min_pooling=MIN_POOLING, test_samples=0, quiet=True,
                       checkpointing=checkpointing).validated(cfg)
        return run_pool(job, cfg, workers=workers, cluster=cluster)

    points = pool_points(args.devices, args.pool_rows, args.pool_batch)
    # Every device built first: a run's wall time is its simulators', not their builds'.
    from trainingcxl.sim.runner import build
    from trainingcxl.spec.pool import device_configs
    for cfg in {c.hardware_digest(): c for _, _, p in points for c in device_configs(p)}.values():
        build("verilator", cfg, log=say)
    for scaling, n, cfg in points:
        rec = one(cfg, True, args.jobs)
        base = one(cfg, False, args.jobs)
        fig = _figures(rec, args.pool_batch, first)
        fig.update({
            "scaling": scaling, "devices": n, "rows_per_table": cfg.tables[0],
            "switch_latency": rec.pool.switch_latency, "workers": rec.pool.workers,
            "cycles_per_batch_no_checkpoint": _figures(base, args.pool_batch, first)["cycles_per_batch"],
            "golden_match": rec.golden_match and base.golden_match,
            "device_cycles_per_batch": [sum(d.losses("cycles_per_batch")[first - 1:])
                                        / len(d.losses("cycles_per_batch")[first - 1:])
                                        for d in rec.devices],
        })
        fig["checkpoint_overhead"] = fig["cycles_per_batch"] / fig["cycles_per_batch_no_checkpoint"] - 1
        rows.append(fig)
        say(f"[pool] {scaling} {n} device(s), 8 tables x {cfg.tables[0]:,} rows: "
            f"{fig['cycles_per_batch']:,.0f} cycles/batch, {fig['wall_s_per_batch']:.1f} s/batch "
            f"wall; {time.monotonic() - t0:.0f} s so far")
    workers = []
    if args.pool_workers:
        n = max(args.devices)
        cfg = rm_config(args.pool_rows, args.pool_batch).replace(pool=PoolShape(devices=n))
        for w in args.pool_workers:
            rec = one(cfg, True, w)
            workers.append({"devices": n, "workers": w, **_figures(rec, args.pool_batch, first),
                            "cycles": rec.cycles, "golden_match": rec.golden_match})
            say(f"[pool] {n} devices on {w} simulator(s) at once: "
                f"{workers[-1]['wall_s_per_batch']:.1f} s/batch, {rec.cycles:,} cycles")
    if cluster is not None:
        cluster.close()
    return {"batches": args.batches, "batch_size": args.pool_batch, "rows": args.pool_rows,
            "where": args.cluster,
            "seed": args.seed, "window": [first, args.batches], "points": rows,
            "workers": workers,
            "same_cycles_any_workers": len({w["cycles"] for w in workers}) <= 1,
            "wall_s": time.monotonic() - t0}


def report(result, say):
    say(f"\n  pool of devices: 8 tables x dim 16, batches of {result['batch_size']}, "
        f"batches {result['window'][0]}..{result['window'][1]} measured")
    say(f"  {'scaling':<7} {'devices':>7} {'rows/table':>10} {'switch':>6} {'cyc/batch':>10} "
        f"{'ckpt ovh':>8} {'samples/sim s':>13} {'samples/wall s':>14} {'wall s/batch':>12}  golden")
    for r in result["points"]:
        say(f"  {r['scaling']:<7} {r['devices']:>7} {r['rows_per_table']:>10,} "
            f"{r['switch_latency']:>6} {r['cycles_per_batch']:>10,.0f} "
            f"{r['checkpoint_overhead']:>8.1%} {r['samples_per_sim_s']:>13,.0f} "
            f"{r['samples_per_wall_s']:>14,.1f} {r['wall_s_per_batch']:>12.1f}  "
            f"{'bit-exact' if r['golden_match'] else 'MISMATCH'}")
    for w in result["workers"]:
        say(f"  {w['devices']} devices, {w['workers']} simulator(s) at once: "
            f"{w['wall_s_per_batch']:.1f} s a batch, {w['cycles']:,} cycles")
    if result["workers"]:
        say(f"  cycles the same for any number of simulators: "
            f"{'yes' if result['same_cycles_any_workers'] else 'NO'}")


def plot(result, path):
    """Cycles per batch and simulated samples per second against the pool's size."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # Text that stays readable where the docs show the figure at their column's width.
    with plt.rc_context(DOC_FONTS):
        _draw(result, path, plt)


def _draw(result, path, plt):
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for scaling, marker in (("strong", "o"), ("weak", "s")):
        pts = sorted((r["devices"], r) for r in result["points"]
                     if r["scaling"] == scaling or (r["devices"] == 1))
        x = [n for n, _ in pts]
        axes[0].plot(x, [r["cycles_per_batch"] for _, r in pts], marker=marker, label=scaling)
        axes[1].plot(x, [r["samples_per_sim_s"] for _, r in pts], marker=marker, label=scaling)
    devices = sorted({r["devices"] for r in result["points"]})
    for ax, label in zip(axes, ("cycles per batch", "samples per simulated second")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(devices, [str(n) for n in devices])
        ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
        ax.set_xlabel("devices in the pool")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"bench --pool: 8 tables, batches of {result['batch_size']}, "
                 f"strong: {result['rows']:,} rows a table, weak: {result['rows']:,} x devices")
    fig.tight_layout()
    save_figure(fig, path)


def cmd_pool(args, say):
    """``bench --pool``: run, print, and write the JSON and plot; 1 if any run differed."""
    try:
        result = run_pool_bench(args, say)
    except RuntimeError as e:
        say(f"error: {e}")
        return 1
    publish(result, args, say, report, plot)
    ok = all(r["golden_match"] for r in result["points"]) and result["same_cycles_any_workers"]
    return 0 if ok else 1

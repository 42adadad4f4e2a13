"""``trainingcxl bench --scale``: how the ladder's costs grow with table and batch size.

The scale ladder of :func:`trainingcxl.spec.presets.scale_ladder` (8 tables of
10^3, 10^5 or 10^6 rows; batches of 32, 256 or 2048 samples) runs on the
chosen systems with and without checkpointing, through the ladder's own runs
and analysis (:mod:`trainingcxl.host.commands.bench`). Every batch size of one
table size shares one device, so the ladder needs one simulator build per
table size. Per table size a further ``cxl`` run cuts the power in an update
and measures the recovery, to show its cost does not follow the table's size.
"""

import argparse
import time

from trainingcxl.host.tools.argtypes import DOC_FONTS, save_figure
from trainingcxl.host.tools.ladder import (
    Workload, comparison, overridden, recovery_row, recovery_task, run_key, run_ladder, summarise)
from trainingcxl.host.runs.fanout import fan_out
from trainingcxl.host.runs.runners import DeviceRunner
from trainingcxl.host.protocol.systems import DEFAULT_SYSTEM, RELAXED_K, SYSTEMS
from trainingcxl.spec.presets import SCALE_BATCHES, SCALE_ROWS, scale_ladder

from .report import json_out

__all__ = ["DEFAULT_SYSTEMS", "DEFAULT_BATCHES", "parse_sizes", "parse_batch_sizes",
           "scale_workloads", "run_scale", "report", "plot", "cmd_scale", "publish"]

#: Systems of the default run: every rung of the ladder and the paper's baseline, with
#: and without checkpointing (``pmem``'s CXL.mem traffic runs in gateware, see
#: ``sim/rtl/mem_bulk.py``, so it simulates about as fast as the others).
DEFAULT_SYSTEMS = tuple(SYSTEMS)
#: Batches before the measured window: the first fills the device's state (its marks,
#: the log ring, the first snapshot), the second is the first to overlap a batch before
#: it.
WARMUP_BATCHES = 2
#: Batches of a scale run: the window measured is batches 3..10, a steady state of 8
#: batches, two whole periods of ``cxl``'s MLP snapshots (a pull every K batches
#: behind the energy-backed buffer), so that the window pays its share of them; batch
#: 11 closes the window where it begins (:mod:`trainingcxl.host.protocol.training`).
DEFAULT_BATCHES = WARMUP_BATCHES + 2 * RELAXED_K + 1
#: Shortest bag of the scale workloads (``rm_config``'s bags hold 16 to 32 rows).
MIN_POOLING = 16


def _size_name(text):
    name = text if text.startswith("rm-") else f"rm-{text}"
    if name not in SCALE_ROWS:
        raise argparse.ArgumentTypeError(
            f"unknown table size {text!r}; choose from "
            f"{', '.join(n[len('rm-'):] for n in SCALE_ROWS)}")
    return name


def parse_sizes(text):
    """argparse type: ``1k,100k`` (or ``rm-1k,...``) -> scale preset names, smallest first."""
    names = {_size_name(t.strip()) for t in text.split(",") if t.strip()}
    if not names:
        raise argparse.ArgumentTypeError("empty list of table sizes")
    return tuple(sorted(names, key=SCALE_ROWS.get))


def parse_batch_sizes(text):
    """argparse type: ``32,256`` -> batch sizes, smallest first; each at most the ladder's
    largest (the device's ``max_bags`` is sized for it)."""
    sizes = set()
    for t in (t.strip() for t in text.split(",")):
        if not t:
            continue
        try:
            b = int(t)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{t!r} is not a batch size") from None
        if not 1 <= b <= max(SCALE_BATCHES):
            raise argparse.ArgumentTypeError(f"batch size {b} is not in [1, {max(SCALE_BATCHES)}]")
        sizes.add(b)
    if not sizes:
        raise argparse.ArgumentTypeError("empty list of batch sizes")
    return tuple(sorted(sizes))


def scale_workloads(sizes=tuple(SCALE_ROWS), batch_sizes=SCALE_BATCHES):
    """A :class:`~trainingcxl.host.commands.bench.Workload` for every table size and batch
    size, named like ``rm-1k/b32``. The devices are those of the whole ladder
    (sized for its largest batch), so a subset of batch sizes builds no other."""
    grid = dict(scale_ladder(sizes, tuple(sorted(set(SCALE_BATCHES) | set(batch_sizes)))))
    return [Workload(f"{size}/b{b}", f"{SCALE_ROWS[size]:,} rows x 8 tables, batches of {b}",
                     grid[f"{size}/b{b}"], batch_size=b, min_pooling=MIN_POOLING)
            for size in sizes for b in batch_sizes]


def _split(name):
    """``rm-1k/b32`` -> ``("rm-1k", 32)``."""
    size, b = name.split("/b")
    return size, int(b)


# -- the runs --------------------------------------------------------------------------

def run_scale(args, say):
    """Run the scale ladder and the recovery runs; returns the JSON-ready result."""
    workloads = overridden(scale_workloads(args.sizes, args.batch_sizes), getattr(args, "set", []),
                           getattr(args, "media", None))
    media = ",".join(sorted({w.config.media_profile for w in workloads}))
    systems = args.systems
    say(f"[scale] table sizes {', '.join(args.sizes)}; batches of "
        f"{', '.join(map(str, args.batch_sizes))}; systems {', '.join(systems)}; "
        f"{len({w.config.hardware_digest() for w in workloads})} device build(s); media {media}")
    t0 = time.monotonic()

    def progress(result):
        task, record, error = result
        ok = "FAILED" if error or not (record and record.golden_match) else "ok"
        cyc = record.window.cycles if record and record.window else None
        per = f"{cyc / record.window.batches:,.0f} cycles/batch, " if cyc else ""
        workload, system, checkpointing = run_key(task)
        say(f"[scale] {workload} {system} checkpointing "
            f"{'on' if checkpointing else 'off'}: {ok}, {per}"
            f"simulated in {(record and record.wall_s) or 0:.0f} s; {time.monotonic() - t0:.0f} s so far")

    results, errors = run_ladder(args, workloads, systems, say, on_result=progress,
                                 warmup=WARMUP_BATCHES)
    summary = summarise(results, workloads, systems)
    for w in workloads:
        for s, fig in summary.get(w.name, {}).items():
            on, off = results[(w.name, s, True)][1], (results.get((w.name, s, False)) or (0, None))[1]
            fig["sim_wall_s"] = on.wall_s
            fig["sim_wall_s_no_checkpoint"] = off.wall_s if off else None
            fig["sim_cycles_per_s"] = on.cycles / on.wall_s if on.wall_s else None

    recovery = []
    if not args.skip_recovery:
        # The smallest batch of each table size: its device, so no further build.
        first = {}
        for w in workloads:
            first.setdefault(_split(w.name)[0], w)
        say(f"[scale] recovery: a power failure in an update on {DEFAULT_SYSTEM}, one run per "
            f"table size")
        tasks = [recovery_task(k, w, args) for k, w in enumerate(first.values())]
        for result in fan_out(DeviceRunner(), tasks, args.fan_out):
            row = recovery_row(*result)
            size, b = _split(row["workload"])
            row.update(size=size, rows=SCALE_ROWS[size], batch_size=b)
            recovery.append(row)
            if row["error"]:
                errors.append({"run": (row["workload"], DEFAULT_SYSTEM, "recovery"),
                               "error": row["error"]})
        recovery.sort(key=lambda r: r["rows"])

    devices = {}
    for w in workloads:
        devices.setdefault(_split(w.name)[0], {
            "config": w.config.to_dict(), "hardware_digest": w.config.hardware_digest(),
            "log_lines": w.config.log_size})
    grid = []
    for w in workloads:
        size, b = _split(w.name)
        for s in systems:
            fig = summary.get(w.name, {}).get(s)
            grid.append({"size": size, "rows": SCALE_ROWS[size], "batch_size": b, "system": s,
                         "media": media, "ok": bool(fig and fig["golden_match"]), **(fig or {})})
    return {
        "sizes": list(args.sizes), "batch_sizes": list(args.batch_sizes),
        "systems": {s: SYSTEMS[s].summary for s in systems},
        "batches": args.batches, "seed": args.seed, "media": media,
        "devices": devices,
        "grid": grid, "recovery": recovery,
        "errors": [{"run": list(e["run"]), "error": e["error"]} for e in errors],
        "wall_s": time.monotonic() - t0,
    }


# -- report ----------------------------------------------------------------------------

def _num(v, fmt, width=10):
    return f"{'-':>{width}}" if v is None else f"{v:>{width}{fmt}}"


def report(result, say):
    """A table per table size (a row per batch size and system: its cycles per batch beside
    both PMEM bounds of the same batches, the scheme's and the floor of exact recovery,
    :mod:`trainingcxl.host.model.bound`, and the PMEM lines it wrote per distinct row),
    then the recovery runs."""
    head = (f"  {'batch':>6} {'system':<11} {'cyc/batch':>11} {'ckpt ovh':>9} {'bound':>10} "
            f"{'of bound':>8} {'floor':>10} {'of floor':>8} {'wr/row':>6} {'fallbk':>6} "
            f"{'PMEM wr B':>11} "
            f"{'link B':>11} {'energy mJ':>10} {'sim s':>7} {'cyc/s':>9}  speedup and energy "
            f"saving over host-pmem, pmem")
    for size in result["sizes"]:
        rows = [r for r in result["grid"] if r["size"] == size]
        say(f"\n  {size}: 8 tables x {rows[0]['rows']:,} rows" if rows else f"\n  {size}")
        say(head)
        for r in rows:
            if not r["ok"]:
                say(f"  {r['batch_size']:>6} {r['system']:<11} FAILED (see the errors below)")
                continue
            say(f"  {r['batch_size']:>6} {r['system']:<11} {r['cycles_per_batch']:>11,.0f} "
                f"{_num(r.get('checkpoint_overhead'), '.2%', width=9)} "
                f"{r['bound_cycles']:>10,.0f} {r['fraction_of_bound']:>8.1%} "
                f"{r['floor_cycles']:>10,.0f} {r['fraction_of_floor']:>8.1%} "
                f"{_num(r.get('write_lines_per_row'), '.2f', width=6)} "
                f"{r.get('strict_fallbacks', 0):>6} "
                f"{r['pmem_bytes_written_per_batch']['total']:>11,.0f} "
                f"{r['link_bytes_per_batch']:>11,.0f} {1e3 * r['energy_per_batch_j']:>10.3f} "
                f"{r['sim_wall_s']:>7.1f} {_num(r['sim_cycles_per_s'], ',.0f', width=9)}  "
                + " ".join(f"{comparison(r.get(f'speedup_vs_{b}'), 'x'):>6} "
                           f"{comparison(r.get(f'energy_saving_vs_{b}'), '%'):>6}"
                           for b in ("host_pmem", "pmem")))
    if result["recovery"]:
        say("\n  recovery (cxl, a power failure in an update):")
        say(f"  {'size':<8} {'rows':>10} {'log lines':>10} {'rolled back':>12} {'lines read':>11} "
            f"{'cycles':>10}  invariants")
        for r in result["recovery"]:
            say(f"  {r['size']:<8} {r['rows']:>10,} {r['log_lines']:>10,} "
                f"{_num(r['rolled_back'], ',', width=12)} {_num(r.get('recovery_lines'), ',', width=11)} "
                f"{_num(r['recovery_cycles'], ',', width=10)}  {'hold' if r['consistent'] else 'BROKEN'}")
    for e in result["errors"]:
        say(f"  FAILED {' '.join(map(str, e['run']))}: {str(e['error'])[:300]}")


#: The plot's rows of panels: (y label, figure of a grid row). Linear axes from 0: a
#: bar's length is its figure.
PLOT_ROWS = (
    ("cycles per batch\n(black: floor)", lambda r: r["cycles_per_batch"]),
    ("speedup over\nhost-pmem", lambda r: r.get("speedup_vs_host_pmem")),
    ("share of the floor\nof exact recovery", lambda r: r["fraction_of_floor"]),
)


def plot(result, path):
    """A column of panels per batch size: each system's cycles per batch beside the PMEM
    bound, its speedup over ``host-pmem`` and its share of the bound, grouped by table
    size; one legend for the figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # Text that stays readable where the docs show the figure at their column's width.
    with plt.rc_context(DOC_FONTS):
        _draw(result, path, plt)


def _draw(result, path, plt):
    ok = [r for r in result["grid"] if r["ok"]]
    systems = list(result["systems"])
    sizes = [s for s in result["sizes"] if any(r["size"] == s for r in ok)]
    batches = [b for b in result["batch_sizes"] if any(r["batch_size"] == b for r in ok)]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / max(1, len(systems))
    fig, axes = plt.subplots(len(PLOT_ROWS), max(1, len(batches)), squeeze=False,
                             figsize=(5.2 * max(1, len(batches)), 3.8 * len(PLOT_ROWS)))
    for col, b in enumerate(batches):
        for row, (label, value) in enumerate(PLOT_ROWS):
            ax = axes[row][col]
            for k, s in enumerate(systems):
                mine = [(i + (k - (len(systems) - 1) / 2) * width, r)
                        for i, size in enumerate(sizes) for r in ok
                        if r["size"] == size and r["batch_size"] == b and r["system"] == s
                        and value(r) is not None]
                if not mine:
                    continue
                x, rs = zip(*mine)
                ax.bar(x, [value(r) for r in rs], width, color=colours[k % len(colours)],
                       label=s if (row, col) == (0, 0) else None)
                if row == 0:            # the floor at each system's K
                    ax.hlines([r["floor_cycles"] for r in rs], [v - width / 2 for v in x],
                              [v + width / 2 for v in x], colors="black", linewidth=1.5)
            if row == 0:
                ax.set_title(f"batch of {b}")
                ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
            else:
                ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
            ax.set_xticks(range(len(sizes)))
            ax.set_xticklabels([f"$10^{len(str(SCALE_ROWS[s])) - 1}$ rows" for s in sizes])
            ax.grid(alpha=0.3, axis="y", which="both")
            if col == 0:
                ax.set_ylabel(label)
    fig.suptitle(f"bench --scale, {result.get('media', 'emulated')} media: batches "
                 f"{WARMUP_BATCHES + 1}..{result['batches'] - 1} of each run measured")
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.legend(loc="upper center", bbox_to_anchor=(0.5, 0.95), ncol=len(systems),
               frameon=False)
    save_figure(fig, path)


def cmd_scale(args, say):
    """``bench --scale``: run, print, and write the JSON and plot; 1 if any run failed."""
    from trainingcxl.sim.runner import BenchFailure
    try:
        result = run_scale(args, say)
    except (BenchFailure, RuntimeError) as e:
        say(f"error: {e}")
        return 1
    publish(result, args, say, report, plot)
    return 1 if result["errors"] else 0


def publish(result, args, say, report, plot):
    """Print a benchmark's ``result`` (``report``), then write its JSON and its plot:
    the JSON first, so that a figure that cannot be drawn loses no measurement."""
    report(result, say)
    say(f"  wall time {result['wall_s']:.0f} s")
    json_out(args.json, result, say=say, args=args)
    if args.plot:
        plot(result, args.plot)
        say(f"  plot  {args.plot}")

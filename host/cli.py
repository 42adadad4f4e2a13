"""The ``trainingcxl`` command line."""

import argparse
import json
import sys
import time
from pathlib import Path

from trainingcxl.host.tools.argtypes import (add_set_option, fraction as _fraction,
                                             nonneg as _nonneg, positive as _positive,
                                             save_figure, with_overrides,
                                             write_json as _write_json)
from trainingcxl.spec.config import PRESETS, ConfigError, load_config
from trainingcxl.host.tools.jobs import run_job

__all__ = ["main"]


def _config_arg(text):
    try:
        return load_config(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _check_workload(config, args):
    if args.batch_size * config.n_tables > config.max_bags:
        raise SystemExit(f"error: --batch-size {args.batch_size} x {config.n_tables} tables exceeds "
                         f"the configuration's max_bags ({config.max_bags})")
    if args.max_pooling is not None and not 0 <= args.max_pooling <= config.max_pooling:
        raise SystemExit(f"error: --max-pooling must be in [0, {config.max_pooling}] for this "
                         f"configuration")


def cmd_lookup_demo(args):
    cfg = args.config
    _check_workload(cfg, args)
    print(f"trainingcxl lookup demo: {cfg.n_tables} tables {list(cfg.tables)} x dim {cfg.dim}, "
          f"{args.batches} batches of {args.batch_size} samples on {args.sim}", flush=True)
    job = {"seed": args.seed, "batches": args.batches, "batch_size": args.batch_size}
    if args.max_pooling is not None:
        job["max_pooling"] = args.max_pooling
    t0 = time.monotonic()
    from trainingcxl.sim.runner import BenchFailure
    try:
        rec = run_job(args.sim, cfg, job, waves=args.waves)
    except BenchFailure as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    peak = cfg.pmem.read_rate[0] / cfg.pmem.read_rate[1]
    lines = sum(b["pmem_lines"] for b in rec["batches"])
    busy = sum(b["busy_cycles"] for b in rec["batches"])
    summary = {
        "sim": args.sim,
        "batches": len(rec["batches"]),
        "bags": sum(b["bags"] for b in rec["batches"]),
        "rows_gathered": sum(b["indices"] for b in rec["batches"]),
        "cycles_per_batch": [b["cycles"] for b in rec["batches"]],
        "lines_per_cycle": lines / busy if busy else 0.0,
        "pmem_peak_lines_per_cycle": peak,
        "golden_match": rec["golden_match"],
        "sim_cycles_per_s": rec["sim_cycles_per_s"],
        "wall_s": time.monotonic() - t0,
        "job": rec,
    }
    print()
    print(f"  batches            {summary['batches']} ({summary['bags']} bags, "
          f"{summary['rows_gathered']} rows gathered from PMEM)")
    print(f"  cycles per batch   {', '.join(map(str, summary['cycles_per_batch']))}")
    print(f"  PMEM read rate     {summary['lines_per_cycle']:.3f} lines/cycle "
          f"(peak {peak:.3f}, {100 * summary['lines_per_cycle'] / peak:.1f}%)")
    print(f"  golden model       {'bit-exact on every batch' if rec['golden_match'] else 'MISMATCH'}")
    print(f"  simulation         {summary['sim_cycles_per_s']:,.0f} cycles/s, "
          f"{summary['wall_s']:.1f} s in all")
    if args.waves:
        print(f"  waveform           {args.waves}")
    if args.json:
        _write_json(args.json, summary)
        print(f"  JSON               {args.json}")
    return 0 if rec["golden_match"] else 1


def cmd_bench_lookup(args):
    from trainingcxl.sim.runner import BenchFailure
    big = args.config
    _check_workload(big, args)
    peak = big.pmem.read_rate[0] / big.pmem.read_rate[1]
    result = {}
    try:
        print(f"[1/3] bandwidth: {args.batches} batches of {args.batch_size} samples on Verilator, "
              f"config with {big.n_tables} tables", flush=True)
        job = {"seed": args.seed, "batches": args.batches, "batch_size": args.batch_size,
               "min_pooling": big.max_pooling // 2}
        rec = run_job("verilator", big, job)
        lines = sum(b["pmem_lines"] for b in rec["batches"])
        busy = sum(b["busy_cycles"] for b in rec["batches"])
        achieved = lines / busy
        result.update({
            "lookup_efficiency": achieved / peak,
            "achieved_lines_per_cycle": achieved,
            "peak_lines_per_cycle": peak,
            "pmem_lines": lines,
            "busy_cycles": busy,
            "rows_per_cycle": achieved / big.lines_per_row,
            "golden_match": rec["golden_match"],
            "bandwidth_run": rec,
        })
        small = PRESETS["tiny"]
        speed = {}
        common = {"seed": args.seed, "batches": 4, "batch_size": 128}
        for k, sim in enumerate(("verilator", "icarus")):
            print(f"[{2 + k}/3] simulation speed on {sim}: the same small workload", flush=True)
            rec = run_job(sim, small, common)
            speed[sim] = rec["total_cycles_per_s"]
            result.setdefault("speed_runs", {})[sim] = rec
            result["golden_match"] = result["golden_match"] and rec["golden_match"]
        result["sim_cycles_per_s"] = speed
    except BenchFailure as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print()
    print(f"  lookup bandwidth   {achieved:.3f} lines/cycle of a {peak:.3f} peak: "
          f"{100 * result['lookup_efficiency']:.1f}% ({lines} lines in {busy} busy cycles)")
    print(f"  simulation speed   Verilator {speed['verilator']:,.0f} cycles/s, "
          f"Icarus {speed['icarus']:,.0f} cycles/s "
          f"({speed['verilator'] / max(speed['icarus'], 1e-9):.0f}x)")
    print(f"  golden model       {'bit-exact' if result['golden_match'] else 'MISMATCH'}")
    if args.json:
        _write_json(args.json, result)
        print(f"  JSON               {args.json}")
    return 0 if result["golden_match"] else 1


def _plot_losses(record, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    evals = [e for e in record.get("eval", ()) if e["device"]["auc"] is not None]
    fig, axes = plt.subplots(1, 2 if evals else 1, figsize=(12 if evals else 7, 4), squeeze=False)
    ax = axes[0][0]
    x = range(1, len(record["loss"]) + 1)
    ax.plot(x, record["loss"], label="device (fixed-point embeddings)", lw=1.5)
    ax.plot(x, record["loss_ref"], label="float32 reference", lw=1, ls="--")
    ax.set_xlabel("batch")
    ax.set_ylabel("training loss (binary cross-entropy)")
    ax.set_title("trainingcxl: DLRM training on the RTL")
    ax.grid(alpha=0.3)
    ax.legend()
    if evals:
        ax = axes[0][1]
        b = [e["batch"] for e in evals]
        ax.plot(b, [e["device"]["auc"] for e in evals], "o-", label="device", lw=1.5)
        ax.plot(b, [e["reference"]["auc"] for e in evals], "x--", label="float32 reference", lw=1)
        ax.set_xlabel("batch")
        ax.set_ylabel("test ROC AUC")
        ax.set_title(f"held out: {record['test_set']['name']}")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def _check_device_top(cfg):
    """Stop with a one-line error if the simulated device top cannot run ``cfg``."""
    from trainingcxl.sim.rtl.top import SimTop
    try:
        SimTop.check(cfg)
    except ValueError as e:
        raise SystemExit(f"error: {e}")


def cmd_train(args):
    from trainingcxl.sim.runner import BenchFailure
    if args.target != "sim":
        if args.set:
            raise SystemExit("error: --set is for --target sim (a board runs the configuration "
                             "it was built with)")
        from trainingcxl.host.tools.board_cli import cmd_train_board
        return cmd_train_board(args)
    if args.config is None:
        args.config = with_overrides(PRESETS["small"], args.set)
    for flag, value in (("--port", args.port), ("--baud", args.baud)):
        if value is not None:
            raise SystemExit(f"error: {flag} is for --target board")
    cfg = args.config
    _check_device_top(cfg)
    if args.batch_size is None:
        args.batch_size = cfg.model.batch_size
    if args.batch_size * cfg.n_tables > cfg.max_bags:
        raise SystemExit(f"error: --batch-size {args.batch_size} x {cfg.n_tables} tables exceeds "
                         f"the configuration's max_bags ({cfg.max_bags})")
    test_job = _held_out(args, cfg)
    if args.data != "synthetic":
        from trainingcxl.host.model.criteo import CriteoDataset
        try:     # fail here, before any build, on a bad file or a mismatched configuration
            ds = CriteoDataset(cfg, args.data, batch_size=args.batch_size, on_error=args.on_bad_lines)
            if args.test_fraction:
                ds, held = ds.split(args.test_fraction)
                held.test_set().check_labels()
        except (OSError, ValueError) as e:
            raise SystemExit(f"error: {e}")
        if ds.skipped:
            print(f"note: skipped {ds.skipped} malformed lines of {args.data}, first: {ds.problems[0]}",
                  file=sys.stderr)
    from trainingcxl.host.tools.plans import check_checkpoint_regions, failure_plan
    from trainingcxl.host.protocol.systems import SYSTEMS
    system = SYSTEMS[args.system]
    if system.host_bus and args.sim != "verilator":
        raise SystemExit("error: --system host-pmem reaches the media through Verilator's "
                         "backdoor; use --sim verilator")
    plan = failure_plan(fail_at=args.fail_at, fail_in=args.fail_in, random=args.inject_failures)
    if any(e.get("phase") == "log" for e in plan) and not system.log_pass:
        raise SystemExit(f"error: system {system.name} has no 'log' phase (only near-data and "
                         f"cxl-d log in a pass of their own)")
    if args.no_checkpoint and plan:
        raise SystemExit("error: power failures need checkpointing; drop --no-checkpoint or the "
                         "failure options")
    if args.staleness is None:
        args.staleness = system.staleness
    relaxed = system.engines and (system.relaxed or args.relaxed or cfg.relaxed_lookup)
    if relaxed and "relaxed" not in cfg.blocks:
        why = f"system {system.name}" + (", --relaxed" if args.relaxed else "")
        raise SystemExit(f"error: relaxed order ({why}) "
                         f"needs the relaxed block, which this configuration leaves out "
                         f"(blocks: {', '.join(cfg.blocks) or 'none'}); use a strict-order system "
                         f"such as cxl-b")
    if not args.no_checkpoint:
        # The undo log must hold the distinct rows of the batches live at once.
        if args.data == "synthetic":
            from trainingcxl.host.model.data import SyntheticWorkload
            ds = SyntheticWorkload(cfg, seed=args.seed, batch_size=args.batch_size)
        try:
            check_checkpoint_regions(cfg, args.batch_size,
                                     [ds.batch(i) for i in range(args.batches)], relaxed=relaxed)
        except ValueError as e:
            raise SystemExit(f"error: {e}")
    order = "relaxed" if relaxed else "strict"
    checkpoints = (f"staleness K = {args.staleness}" if not args.no_checkpoint
                   else "checkpointing off")
    print(f"trainingcxl train: system {system.name} ({system.summary}); {args.batches} batches of "
          f"{args.batch_size} samples, {cfg.n_tables} tables x dim {cfg.dim}, data {args.data}, "
          f"{order} order, {checkpoints}, {len(plan)} power failures planned, on {args.sim}",
          flush=True)
    job = {"seed": args.seed, "batches": args.batches, "batch_size": args.batch_size,
           "data": str(Path(args.data).resolve()) if args.data != "synthetic" else "synthetic",
           "on_bad_lines": args.on_bad_lines, "check_every": args.check_every,
           "relaxed": relaxed, "staleness": args.staleness,
           "system": system.name, "checkpointing": not args.no_checkpoint,
           "failures": plan,
           "failure_seed": args.seed if args.failure_seed is None else args.failure_seed,
           **test_job}
    if args.dump:
        job["dump"] = str(Path(args.dump).resolve())
    if args.export:
        job["export"] = str(Path(args.export).resolve())
    t0 = time.monotonic()
    try:
        rec = run_job(args.sim, cfg, job, job="train", partial=True)
    except BenchFailure as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rec.update({"sim": args.sim, "config": cfg.to_dict(), "data": args.data,
                "wall_s": time.monotonic() - t0})
    if "aborted" in rec:
        # The run stopped part-way: say where and why, keep what it found.
        from trainingcxl.host.tools.plans import failure_summary
        print(f"\nerror: the run stopped after {len(rec['loss'])} of {args.batches} batches: "
              f"{rec['aborted']}", file=sys.stderr)
        for line in failure_summary(rec):
            print(line)
        if args.json:
            _write_json(args.json, rec)
            print(f"  JSON               {args.json} (partial)")
        return 1
    first = sum(rec["loss"][:10]) / len(rec["loss"][:10])
    gap = abs(rec["final_loss"] - rec["final_loss_ref"]) / rec["final_loss_ref"]
    print()
    print(f"  loss               {first:.4f} over the first batches -> {rec['final_loss']:.4f} "
          f"over the last (float32 reference {rec['final_loss_ref']:.4f}, {100 * gap:.2f}% apart)")
    print(f"  cycles             {rec['cycles']:,} in all, "
          f"{rec['cycles'] // max(1, rec['batches']):,} per batch "
          f"(GPU model {rec['gpu_cycles_per_batch']:,} per batch)")
    checked = ", ".join(str(c["batch"] + 1) for c in rec["checks"])
    print(f"  golden model       {'bit-exact' if rec['golden_match'] else 'MISMATCH'}: pooled vectors "
          f"of every batch, tables after batches {checked}")
    for line in _eval_summary(rec):
        print(line)
    c = rec["counters"]
    print(f"  device             {c['lookup_lines']:,} PMEM lines gathered, {c['update_lines']:,} "
          f"rewritten ({c['update_forwarded']:,} forwarded on chip)")
    print(f"  checkpointing      {c['log_records']:,} undo records, {c['snapshot_lines']:,} MLP "
          f"lines snapshotted; updates waited {c['log_barrier']:,} cycles for the log, lookups "
          f"{c['lookup_log_holds']:,} for log space and {c['ckpt_stalls']:,} for snapshots")
    from trainingcxl.host.tools.plans import failure_summary
    for line in failure_summary(rec):
        print(line)
    print(f"  wall time          {rec['wall_s']:.1f} s")
    if args.plot:
        _plot_losses(rec, args.plot)
        print(f"  plot               {args.plot}")
    if args.dump:
        print(f"  dump               {args.dump} (tables.npz, mlp.npz, batches.npz)")
    if args.export:
        print(f"  model              {args.export} (model.npz: a PyTorch state dict, model.json)")
    if args.json:
        _write_json(args.json, rec)
        print(f"  JSON               {args.json}")
    return 0 if rec["golden_match"] else 1


def _held_out(args, cfg):
    """The job's test-set arguments from ``--test``, ``--test-fraction``, ``--test-samples``
    and ``--eval-every``; refuses what does not fit the data, before any build."""
    if args.data == "synthetic":
        if args.test or args.test_fraction:
            raise SystemExit("error: --test and --test-fraction are for TSV data; synthetic data "
                             "holds out --test-samples samples of another seeded stream")
        if args.eval_every and not args.test_samples:
            raise SystemExit("error: --eval-every needs a test set (--test-samples 0 has none)")
        return {"test_samples": args.test_samples, "eval_every": args.eval_every}
    if args.test and args.test_fraction:
        raise SystemExit("error: give --test FILE or --test-fraction F, not both")
    if args.test:
        from trainingcxl.host.model.criteo import CriteoDataset
        try:
            CriteoDataset(cfg, args.test, batch_size=args.batch_size,
                          on_error=args.on_bad_lines).test_set().check_labels()
        except (OSError, ValueError) as e:
            raise SystemExit(f"error: {e}")
        return {"test": str(Path(args.test).resolve()), "eval_every": args.eval_every}
    if args.test_fraction:
        return {"test_fraction": args.test_fraction, "eval_every": args.eval_every}
    if args.eval_every:
        raise SystemExit("error: --eval-every needs a test set: --test FILE or --test-fraction F")
    print(f"note: no held-out test set for {args.data} (--test FILE or --test-fraction F); "
          f"training loss only", file=sys.stderr)
    return {}


def _eval_summary(rec):
    """The summary's lines on the held-out evaluation after the last batch."""
    if not rec.get("eval"):
        return []
    last = rec["eval"][-1]
    d, r = last["device"], last["reference"]
    head = f"  test set           {rec['test_set']['name']} ({d['positives']:,} positive), after " \
           f"batch {last['batch']}:"
    if d["auc"] is None:
        return [head, f"                     {d['note']}; log loss {d['log_loss']:.4f} "
                      f"(float32 {r['log_loss']:.4f})"]
    return [head, f"                     AUC {d['auc']:.4f} (float32 {r['auc']:.4f}), log loss "
                  f"{d['log_loss']:.4f} ({r['log_loss']:.4f}), accuracy {100 * d['accuracy']:.2f}% "
                  f"({100 * r['accuracy']:.2f}%)"]


def cmd_make_criteo_sample(args):
    from trainingcxl.host.model.criteo import write_sample
    path = write_sample(args.output, lines=args.lines, seed=args.seed)
    print(f"wrote {args.lines} Criteo-format lines to {path}")
    return 0


def cmd_bench_update(args):
    from trainingcxl.sim.runner import BenchFailure
    cfg = args.config
    _check_workload(cfg, args)
    print(f"UPDATE bandwidth: {args.batches} batches of {args.batch_size} samples on Verilator, "
          f"bags of {cfg.max_pooling // 4} to {cfg.max_pooling} rows", flush=True)
    try:
        rec = run_job("verilator", cfg, {"seed": args.seed, "batches": args.batches,
                                          "batch_size": args.batch_size,
                                          "min_pooling": cfg.max_pooling // 4}, job="update")
    except BenchFailure as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print()
    print(f"  update bandwidth   {100 * rec['update_efficiency']:.1f}% of the PMEM bound "
          f"({rec['lines']} lines rewritten in {rec['busy_cycles']} busy cycles; the read and "
          f"write rates allow {rec['bound_cycles']:.0f})")
    print(f"  golden model       {'bit-exact' if rec['golden_match'] else 'MISMATCH'}")
    if args.json:
        _write_json(args.json, rec)
        print(f"  JSON               {args.json}")
    return 0 if rec["golden_match"] else 1


def cmd_config(args):
    print(json.dumps(args.config.to_dict(), indent=2))
    cfg = args.config
    print(f"# media: {cfg.media_lines} lines ({cfg.media_lines * 64} bytes); tables at line 0, "
          f"log at {cfg.log_base}, commit at {cfg.commit_base}, snapshots at "
          f"{cfg.snapshot_base[0]} and {cfg.snapshot_base[1]}", file=sys.stderr)
    return 0


def cmd_verilog(args):
    from trainingcxl.sim.runner import verilog_for
    path = verilog_for(args.config, log=lambda t: print(t, file=sys.stderr))
    if args.output:
        Path(args.output).write_text(path.read_text())
        print(args.output)
    else:
        print(path)
    if args.lint:
        import subprocess
        from trainingcxl.sim.toolchain import setup_verilator
        setup_verilator()
        done = subprocess.run(["verilator", "--lint-only", str(path)])
        print("lint: clean" if done.returncode == 0 else "lint: warnings (see above)", file=sys.stderr)
        return done.returncode
    return 0


def cmd_formal(args):
    from trainingcxl.sim.formal import PROOFS, FormalError, run_proof
    if args.list:
        for name, proof in PROOFS.items():
            print(f"{name:22s} depth {proof.depth:3d}  {proof.what}")
        return 0
    names = args.proof or list(PROOFS)
    unknown = [n for n in names if n not in PROOFS]
    if unknown:
        print(f"error: unknown proof(s) {', '.join(unknown)}; the proofs are {', '.join(PROOFS)}",
              file=sys.stderr)
        return 2
    results = []
    for k, name in enumerate(names, 1):
        print(f"[{k}/{len(names)}] {name}: bounded model check ...", file=sys.stderr, flush=True)
        try:
            r = run_proof(name, work=args.work, depth=args.depth)
        except FormalError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        results.append(r)
        line = f"{r['status']:5s} {name} (depth {r['depth']}, {r['seconds']} s)"
        if r["status"] != "PASS":
            line += f": {r.get('assertion', 'see ' + r['log'])}"
            if "trace" in r:
                line += f"\n      counterexample: {r['trace']}"
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps({"proofs": results}, indent=2) + "\n")
    return 0 if all(r["status"] == "PASS" for r in results) else 1


def build_parser():
    p = argparse.ArgumentParser(
        prog="trainingcxl",
        description="TrainingCXL on RTL: embedding tables in PMEM behind a CXL controller with "
                    "near-memory compute. Commands build the Amaranth device, simulate it with "
                    "cocotb under Verilator or Icarus, and compare every result with the golden model.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def config_option(sp, default, device_top=True):
        """``device_top``: the command simulates the device top, which refuses some
        configurations (``SimTop.check``) before anything is built."""
        sp.add_argument("--config", type=_config_arg, default=PRESETS[default],
                        help=f"a preset ({', '.join(PRESETS)}) or a .json/.toml file of "
                             f"configuration fields (default: {default})")
        add_set_option(sp)
        sp.set_defaults(device_top=device_top)

    def workload_options(sp, batches, batch_size):
        sp.add_argument("--batches", type=_positive, default=batches,
                        help=f"batches to run (default: {batches})")
        sp.add_argument("--batch-size", type=_positive, default=batch_size,
                        help="samples per batch; each sample has one bag per table (default: "
                             + (f"{batch_size})" if batch_size else "the configuration's model.batch_size)"))
        sp.add_argument("--seed", type=_nonneg, default=0, help="workload and table seed (default: 0)")
        sp.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT")

    sp = sub.add_parser("lookup-demo", help="run LOOKUP batches on the simulated device and check them",
                        description="Loads random embedding tables into the device's PMEM through "
                                    "CXL.mem, runs synthetic batches (Zipf row popularity) through "
                                    "the lookup engine, and compares every pooled vector with the "
                                    "golden model bit for bit.")
    sp.add_argument("--sim", choices=("verilator", "icarus"), default="verilator",
                    help="simulator (default: verilator; icarus is about 50x slower)")
    config_option(sp, "small")
    workload_options(sp, 4, 32)
    sp.add_argument("--max-pooling", type=_nonneg, help="largest bag (default: the configuration's)")
    sp.add_argument("--waves", metavar="FILE",
                    help="record a waveform of the whole run into FILE (VCD for Verilator, FST "
                         "for Icarus); slower, and the device is compiled again with tracing")
    sp.set_defaults(func=cmd_lookup_demo)

    sp = sub.add_parser("bench-lookup", help="measure lookup bandwidth and simulation speed",
                        description="Runs a large batch on Verilator and reports the PMEM lines the "
                                    "lookup engine reads per busy cycle against the PMEM model's peak "
                                    "read rate (lookup_efficiency), then runs one small workload under "
                                    "Verilator and Icarus (tiny preset, 4 batches of 128 samples) and "
                                    "reports simulated cycles per wall-second, table load included.")
    config_option(sp, "bench")
    workload_options(sp, 2, 256)
    sp.set_defaults(func=cmd_bench_lookup, max_pooling=None)

    sp = sub.add_parser("train", help="train DLRM on the simulated device against the golden model",
                        description="Trains DLRM with the embedding tables in the simulated device's "
                                    "PMEM: the device pools (LOOKUP) and updates (UPDATE) the "
                                    "embeddings, a GPU model runs the MLPs and charges its cycles. "
                                    "Every pooled vector, and the tables at regular checks, are "
                                    "compared bit for bit with the golden model; a float32 reference "
                                    "trains beside it. Each batch is committed and the MLP "
                                    "snapshotted; with --inject-failures, --fail-at or --fail-in "
                                    "the power fails at chosen moments, the device recovers "
                                    "(RECOVER), the invariants of docs/design.md, \"Invariants\", "
                                    "are checked against the golden model, and training resumes.")
    sp.add_argument("--sim", choices=("verilator", "icarus"), default="verilator",
                    help="simulator (default: verilator; icarus is about 30x slower, use --config tiny)")
    sp.add_argument("--config", type=_config_arg, default=None,
                    help=f"a preset ({', '.join(PRESETS)}) or a .json/.toml file of configuration "
                         f"fields (default: small; on board targets the board's own)")
    add_set_option(sp)
    workload_options(sp, 50, None)
    from trainingcxl.host.tools.board_cli import add_target_options
    add_target_options(sp)
    sp.add_argument("--data", default="synthetic",
                    help="'synthetic' (Zipf rows, a learnable signal) or a Criteo-format TSV file "
                         "(default: synthetic)")
    sp.add_argument("--on-bad-lines", choices=("raise", "skip"), default="raise",
                    help="malformed TSV lines: stop with the line number, or skip and count them")
    sp.add_argument("--test", metavar="FILE",
                    help="with TSV data: a Criteo-format file of held-out samples to evaluate on")
    sp.add_argument("--test-fraction", type=_fraction, metavar="F",
                    help="with TSV data: hold out the last F of the file's samples (the Criteo "
                         "convention: the test set is the end of the file) and train on the rest")
    sp.add_argument("--test-samples", type=_nonneg, default=4096, metavar="N",
                    help="with synthetic data: evaluate on N samples of another seeded stream "
                         "(default: 4096; 0: no evaluation)")
    sp.add_argument("--eval-every", type=_nonneg, default=0, metavar="N",
                    help="evaluate on the test set every N batches as well as after the last "
                         "(default: after the last only): log loss, ROC AUC and accuracy of the "
                         "device-trained model (tables read back) and of the float32 reference")
    from trainingcxl.host.protocol.systems import SYSTEMS
    sp.add_argument("--system", choices=tuple(SYSTEMS), default="cxl",
                    help="the rung of the evaluation ladder to train on (default: cxl): "
                         + "; ".join(f"{s.name}: {s.summary}" for s in SYSTEMS.values()))
    sp.add_argument("--no-checkpoint", action="store_true",
                    help="no undo log, commits or snapshots (to measure what checkpointing "
                         "costs); power failures cannot be injected")
    sp.add_argument("--relaxed", action="store_true",
                    help="relaxed order: look up batch n+1 while the GPU computes batch n, "
                         "before batch n's update, and finish it afterwards (bit-identical "
                         "results; default: the system's, or the configuration's relaxed_lookup)")
    sp.add_argument("--check-every", type=_positive, default=10,
                    help="read the tables back and compare them every N batches (and at the "
                         "first and last; default: 10)")
    sp.add_argument("--dump", metavar="DIR", help="write final tables, MLP parameters and the "
                                                 "batches used as .npz files into DIR")
    sp.add_argument("--export", metavar="DIR",
                    help="write the device-trained model into DIR: model.npz, float32 arrays "
                         "named as a PyTorch DLRM's state dict (embeddings.T.weight, "
                         "bottom_mlp.I.weight, ...), and model.json with its shapes "
                         "(docs/usage.md, \"Exporting a model\")")
    sp.add_argument("--plot", metavar="OUT.png", help="draw the loss curve, device vs float32, "
                                                     "and the test AUC at each evaluation")
    from trainingcxl.host.tools.campaign import add_commands
    from trainingcxl.host.tools.plans import add_failure_options
    add_failure_options(sp)
    sp.set_defaults(func=cmd_train)
    add_commands(sub, config_option)
    from trainingcxl.host.tools.bench import add_bench_command
    add_bench_command(sub)
    from trainingcxl.host.tools.study import add_study_command
    add_study_command(sub, config_option)
    from trainingcxl.host.tools.board_cli import add_build_command
    add_build_command(sub)

    sp = sub.add_parser("make-criteo-sample", help="write a small Criteo-format TSV with a learnable signal")
    sp.add_argument("output", help="file to write")
    sp.add_argument("--lines", type=_positive, default=4096, help="samples (default: 4096)")
    sp.add_argument("--seed", type=_nonneg, default=0, help="seed (default: 0)")
    sp.set_defaults(func=cmd_make_criteo_sample)

    sp = sub.add_parser("bench-update", help="measure UPDATE bandwidth against the PMEM model's bound",
                        description="Runs UPDATE batches (Zipf rows, so hot rows repeat) on Verilator "
                                    "and reports the busy cycles against the bound the PMEM model's "
                                    "read and write rates set for rewriting the touched lines "
                                    "(update_efficiency), checking the tables against the golden model.")
    config_option(sp, "bench")
    workload_options(sp, 2, 64)
    sp.set_defaults(func=cmd_bench_update, max_pooling=None)

    sp = sub.add_parser("config", help="print a configuration as JSON")
    sp.add_argument("config", type=_config_arg, nargs="?", default=PRESETS["small"],
                    help="preset name or file (default: small)")
    sp.set_defaults(func=cmd_config)

    sp = sub.add_parser("verilog", help="generate the device's Verilog (cached) and optionally lint it")
    config_option(sp, "tiny", device_top=False)
    sp.add_argument("-o", "--output", help="copy the Verilog here")
    sp.add_argument("--lint", action="store_true", help="run verilator --lint-only on it")
    sp.set_defaults(func=cmd_verilog)

    from trainingcxl.host.tools.fuzz import add_fuzz_command
    add_fuzz_command(sub, config_option)

    sp = sub.add_parser(
        "formal", help="prove the formal properties (stream rule, write-pending queue, "
                       "write-ahead) with SymbiYosys",
        description="Bounded model checks with yowasp-sby and boolector, from reset over every "
                    "input sequence of the proof's depth. Exit status 0 when every proof passes, "
                    "1 when one fails (its counterexample is a VCD trace), 2 on bad arguments.")
    sp.add_argument("--proof", action="append", metavar="NAME",
                    help="run only this proof (repeatable; see --list)")
    sp.add_argument("--depth", type=_positive, help="override the proofs' depth in cycles")
    sp.add_argument("--list", action="store_true", help="list the proofs and what each proves")
    sp.add_argument("--work", help="folder for the solver's files (default .cache/formal)")
    sp.add_argument("--json", metavar="OUT", help="write the results as JSON")
    sp.set_defaults(func=cmd_formal)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    if getattr(args, "set", None) and getattr(args, "config", None) is not None:
        args.config = with_overrides(args.config, args.set)
    if getattr(args, "device_top", False):
        _check_device_top(args.config)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

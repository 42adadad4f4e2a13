"""``bench --scale``: its options, the devices it builds, and its report on a fake result."""

import json

import pytest

from trainingcxl.host.cli import build_parser, main
from trainingcxl.host.commands import bench_scale
from trainingcxl.host.jobs import TrainJob
from trainingcxl.host.runs.task import Result, Task
from trainingcxl.spec.presets import SCALE_ROWS, scale_ladder

from trainingcxl.host.model.bound import batch_bound
from trainingcxl.host.model.data import SyntheticWorkload
from trainingcxl.host.model.regions import distinct_rows
from trainingcxl.host.protocol.run_record import Failure
from tests.tools.test_bench import record, train_record


def parse(*argv):
    return build_parser().parse_args(["bench", *argv])


def test_scale_options_parse_into_sorted_subsets():
    args = parse("--scale", "--sizes", "100k,rm-1k", "--batch-sizes", "256,32", "--systems", "cxl")
    assert args.scale and args.sizes == ("rm-1k", "rm-100k") and args.batch_sizes == (32, 256)
    assert args.systems == "cxl"
    args = parse("--scale")
    assert args.sizes is None and args.batch_sizes is None and args.batches is None


@pytest.mark.parametrize("argv, why", [
    (["--scale", "--sizes", "10k"], "unknown table size '10k'; choose from 1k, 100k, 1m"),
    (["--scale", "--sizes", ","], "empty list of table sizes"),
    (["--scale", "--batch-sizes", "32,x"], "'x' is not a batch size"),
    (["--scale", "--batch-sizes", "4096"], "batch size 4096 is not in [1, 2048]"),
    (["--scale", "--batch-sizes", "0"], "batch size 0 is not in [1, 2048]"),
    (["--scale", "--systems", "gpu"], "unknown gpu"),
    (["--scale", "--batches", "2"], "at least 3"),
])
def test_bad_scale_options_are_refused(argv, why, capsys):
    with pytest.raises(SystemExit):
        parse(*argv)
    assert why in capsys.readouterr().err


@pytest.mark.parametrize("argv, why", [
    (["bench", "--sizes", "1k"], "--sizes only apply with --scale"),
    (["bench", "--batch-sizes", "32"], "--batch-sizes only apply with --scale"),
    (["bench", "--scale", "--speed"], "--scale and --speed are runs of their own"),
    (["bench", "--fan-out", "--loader"], "--loader and --fan-out are runs of their own"),
])
def test_scale_options_without_scale_are_refused(argv, why):
    with pytest.raises(SystemExit, match=why):
        main(argv)


def test_every_batch_size_of_a_table_size_shares_one_device():
    workloads = bench_scale.scale_workloads()
    assert [w.name for w in workloads] == [f"{s}/b{b}" for s in SCALE_ROWS for b in (32, 256, 2048)]
    by_size = {}
    for w in workloads:
        size = w.name.split("/")[0]
        assert w.config.tables == (SCALE_ROWS[size],) * 8
        assert w.config.model.batch_size == w.batch_size
        assert w.config.log_groups >= 2 * w.config.groups_for(
            w.config.records_per_batch(w.batch_size))
        assert w.config.max_bags >= w.batch_size * 8
        by_size.setdefault(size, set()).add(w.config.hardware_digest())
    assert all(len(d) == 1 for d in by_size.values()), by_size
    assert len(set.union(*by_size.values())) == 3
    # A subset of batch sizes runs on the same devices as the whole ladder.
    subset = bench_scale.scale_workloads(("rm-100k",), (32,))
    assert {subset[0].config.hardware_digest()} == by_size["rm-100k"]


def test_prebuild_builds_each_device_once(monkeypatch):
    from trainingcxl.host.runs import cluster
    built = []
    monkeypatch.setattr(cluster, "_build", lambda sim, cfg: built.append(cfg["tables"][0]))
    cluster.LocalPool(1).prebuild([w.config for w in bench_scale.scale_workloads(("rm-1k", "rm-100k"))])
    assert sorted(built) == [1_000, 100_000]


def fake_run(monkeypatch, fail=None):
    """``run_scale`` on made-up records: cycles grow with rows and batch size."""
    def ladder(args, workloads, systems, say, on_result=None, warmup=1):
        results, errors = {}, []
        for w in workloads:
            for s in systems:
                for ckpt in (True, False):
                    grow = w.config.tables[0] // 1000 + w.batch_size + (500 if ckpt else 0)
                    rec = record(pmem_reads=grow, pmem_writes=grow, pmem_writes_data=grow,
                                 link_to_device=grow, link_to_host=grow, lookup_lines=grow)
                    rec.window.cycles = 10_000 + 10 * grow + 100 * systems.index(s)
                    rec = rec.replace(golden_match=(w.name, s) != fail, wall_s=2.0, cycles=50_000)
                    task = Task(0, w.config, TrainJob(system=s, checkpointing=ckpt), label=w.name)
                    results[(w.name, s, ckpt)] = (task, rec)
                    if (w.name, s) == fail:
                        errors.append({"run": (w.name, s, ckpt), "error": "golden mismatch"})
                    if on_result:
                        on_result(Result(task, rec))
        return results, errors

    def recoveries(runner, tasks, cluster, note=None):
        for task in tasks:
            yield task, train_record(golden_match=True, failures=[Failure(
                cycle=0, phase="update", batch=3, durable_before=2, recovery_cycles=64_000,
                rolled_back=900, recovery_lines=1_800, consistent=True)]), None
    monkeypatch.setattr(bench_scale, "run_ladder", ladder)
    monkeypatch.setattr(bench_scale, "fan_out", recoveries)


def scale_args(tmp_path, **kw):
    args = parse("--scale", "--json", str(tmp_path / "s.json"), "--plot", str(tmp_path / "s.png"))
    args.systems, args.sizes, args.batch_sizes, args.batches = ("pmem", "cxl"), ("rm-1k", "rm-100k"), (32, 256), 4
    args.fan_out = None             # the runs are faked: no cluster
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def test_report_json_and_plot_of_a_fake_scale_run(monkeypatch, tmp_path):
    fake_run(monkeypatch)
    lines = []
    assert bench_scale.cmd_scale(scale_args(tmp_path), lines.append) == 0
    text = "\n".join(lines)
    # A table per table size, a row per batch size and system.
    assert "rm-1k: 8 tables x 1,000 rows" in text and "rm-100k: 8 tables x 100,000 rows" in text
    cyc = 10_000 + 10 * (100 + 256 + 500)
    rows = [line.split() for line in lines]
    assert ["256", "pmem", f"{cyc / 2:,.0f}", f"{100 * (cyc / (cyc - 5000) - 1):.2f}%"] in [
        r[:4] for r in rows]
    log_lines = scale_ladder(("rm-100k",))[0][1].log_size
    assert ["rm-100k", "100,000", f"{log_lines:,}", "900", "1,800", "64,000", "hold"] in rows
    # Each row compares with both baselines; host-pmem is not in this run: '-'.
    cxl = next(r for r in rows if r[:2] == ["256", "cxl"])
    assert cxl[-4] == "-" and cxl[-2] == f"{cyc / (cyc + 100):.2f}x"
    out = json.loads((tmp_path / "s.json").read_text())
    assert len(out["grid"]) == 2 * 2 * 2 and all(r["ok"] for r in out["grid"])
    row = next(r for r in out["grid"] if (r["size"], r["batch_size"], r["system"]) == ("rm-100k", 256, "pmem"))
    assert row["cycles_per_batch"] == cyc / 2
    assert row["checkpoint_overhead"] == pytest.approx(cyc / (cyc - 5000) - 1)
    assert row["sim_wall_s"] == 2.0 and row["sim_cycles_per_s"] == 25_000
    assert row["energy_per_batch_j"] > 0 and row["link_bytes_per_batch"] > 0
    # The PMEM bound of the window's batches, the same for every system.
    assert row["bound_cycles"] > 0 and row["fraction_of_bound"] == row["bound_cycles"] / (cyc / 2)
    assert len({r["bound_cycles"] for r in out["grid"]
                if (r["size"], r["batch_size"]) == ("rm-100k", 256)}) == 1      # K alike
    # The floor of exact recovery beside it, from the same batches (the window's, 2..3,
    # are data batches 1 and 2), and the lines written per distinct row of them.
    w = next(w for w in bench_scale.scale_workloads(("rm-100k",), (256,)))
    data = SyntheticWorkload(w.config, seed=scale_args(tmp_path).seed, batch_size=256,
                             min_pooling=bench_scale.MIN_POOLING, zipf_alpha=w.zipf_alpha)
    batches = [data.batch(1), data.batch(2)]
    bounds = [batch_bound(w.config, b, staleness=0) for b in batches]
    assert row["floor_cycles"] == pytest.approx(sum(b.floor_cycles for b in bounds) / 2)
    assert row["bound_cycles"] == pytest.approx(sum(b.cycles for b in bounds) / 2)
    # Behind the energy-backed buffer only the rows reach the media, in both.
    assert w.config.buffer_size and 0 < row["floor_cycles"] == row["bound_cycles"]
    assert row["fraction_of_floor"] == row["floor_cycles"] / (cyc / 2)
    rows_updated = sum(distinct_rows(w.config, b) for b in batches)
    grow = 100 + 256 + 500                  # the fake window's PMEM lines written
    assert row["write_lines_per_row"] == pytest.approx(grow / rows_updated)
    printed = next(r for r in rows if r[:2] == ["256", "pmem"] and r[4] == f"{row['bound_cycles']:,.0f}")
    assert printed[6:9] == [f"{row['floor_cycles']:,.0f}", f"{row['fraction_of_floor']:.1%}",
                            f"{row['write_lines_per_row']:.2f}"]
    assert {d["hardware_digest"] for d in out["devices"].values()} == {
        w.config.hardware_digest() for w in bench_scale.scale_workloads(("rm-1k", "rm-100k"))}
    assert [(r["size"], r["recovery_cycles"], r["rolled_back"], r["recovery_lines"])
            for r in out["recovery"]] == [("rm-1k", 64_000, 900, 1_800), ("rm-100k", 64_000, 900, 1_800)]
    assert "recovery (cxl, a power failure in an update)" in text
    assert (tmp_path / "s.png").stat().st_size > 10_000
    assert sum("[scale] rm-" in line and "checkpointing" in line for line in lines) == 16


def test_a_failed_run_is_reported_and_fails_the_command(monkeypatch, tmp_path):
    fake_run(monkeypatch, fail=("rm-1k/b32", "cxl"))
    lines = []
    assert bench_scale.cmd_scale(scale_args(tmp_path), lines.append) == 1
    text = "\n".join(lines)
    assert ["32", "cxl", "FAILED"] in [line.split()[:3] for line in lines]
    assert "FAILED rm-1k/b32 cxl True: golden mismatch" in text
    out = json.loads((tmp_path / "s.json").read_text())
    bad = [r for r in out["grid"] if not r["ok"]]
    assert [(r["size"], r["batch_size"], r["system"]) for r in bad] == [("rm-1k", 32, "cxl")]
    assert out["errors"]


@pytest.mark.slow
@pytest.mark.cocotb
def test_a_tiny_scale_run_end_to_end(tmp_path, capsys):
    out = tmp_path / "scale.json"
    assert main(["bench", "--scale", "--sizes", "1k", "--batch-sizes", "32", "--systems", "cxl",
                 "--batches", "3", "--json", str(out), "--plot", str(tmp_path / "scale.png")]) == 0
    res = json.loads(out.read_text())
    (row,) = res["grid"]
    assert row["ok"] and row["golden_match"] and (row["size"], row["batch_size"]) == ("rm-1k", 32)
    # Behind the energy-backed buffer the undo records and snapshots stay in it: the
    # media writes the rows alone, and checkpointing is off the critical path.
    assert row["cycles_per_batch"] > 0 and row["cycles_per_batch_no_checkpoint"] > 0
    assert abs(row["checkpoint_overhead"]) < 0.05
    assert row["pmem_bytes_buffered_per_batch"] > 0 == row["pmem_bytes_written_per_batch"]["log"]
    assert row["write_lines_per_row"] == pytest.approx(1) and row["energy_per_batch_j"] > 0
    assert row["sim_wall_s"] > 0
    (rec,) = res["recovery"]
    assert rec["consistent"] and rec["rolled_back"] > 0 and rec["recovery_cycles"] > 0
    assert res["errors"] == []
    assert "rm-1k: 8 tables x 1,000 rows" in capsys.readouterr().out


def test_every_system_is_drawn_and_the_json_comes_first(monkeypatch, tmp_path):
    from trainingcxl.host.protocol.systems import SYSTEMS
    fake_run(monkeypatch)
    args = scale_args(tmp_path, systems=tuple(SYSTEMS))
    assert bench_scale.cmd_scale(args, lambda text: None) == 0
    assert (tmp_path / "s.png").stat().st_size > 0
    assert {r["system"] for r in json.loads((tmp_path / "s.json").read_text())["grid"]} == set(SYSTEMS)
    # A figure that cannot be drawn loses no measurement.
    (tmp_path / "s.json").unlink()
    monkeypatch.setattr(bench_scale, "plot", lambda result, path: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        bench_scale.cmd_scale(args, lambda text: None)
    assert (tmp_path / "s.json").exists()

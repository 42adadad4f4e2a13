"""bench --pool: the points it runs and what it reports (the pool's runs faked)."""

import argparse
import json

from trainingcxl.host.commands import bench_pool


def test_strong_scaling_spreads_the_same_tables_and_weak_grows_them():
    points = bench_pool.pool_points((1, 2, 4, 8), 1000, 256)
    assert [(s, n) for s, n, _ in points] == [("strong", 1), ("strong", 2), ("weak", 2),
                                              ("strong", 4), ("weak", 4), ("strong", 8),
                                              ("weak", 8)]
    for scaling, n, cfg in points:
        assert cfg.pool.devices == n and cfg.n_tables == 8
        assert cfg.tables[0] == (1000 if scaling == "strong" else 1000 * n)


def _fake(monkeypatch, cycles_by_workers=None):
    from trainingcxl.host.protocol.run_record import PoolInfo, TrainRecord
    from trainingcxl.host.runs import pool_coordinator
    from trainingcxl.sim import runner
    monkeypatch.setattr(runner, "build", lambda *a, **kw: None)

    def run_pool(job, cfg, workers=None, cluster=None):
        n = cfg.pool.devices
        per = 1000 * (1 + cfg.tables[0] // 1000) // n + (0 if job.checkpointing else -100)
        total = (cycles_by_workers or {}).get(workers, per * job.batches)
        def record(**fields):
            return TrainRecord(batches=job.batches, system="cxl", staleness=1, relaxed=False,
                               checkpointing=job.checkpointing, gpu_cycles_per_batch=0,
                               cycles_per_batch={b: per for b in range(1, job.batches + 1)},
                               **fields)
        return record(cycles=total, golden_match=True, devices=[record()] * n,
                      pool=PoolInfo(devices=n, workers=workers or 1, where="local",
                                    switch_latency=10 if n > 1 else 0, tables=[], pieces=[],
                                    recoveries=[], wall_s=2.0 * job.batches / (workers or 1)))
    monkeypatch.setattr(pool_coordinator, "run_pool", run_pool)


def _args(tmp_path, **kw):
    base = dict(devices=(1, 2), pool_rows=1000, pool_batch=32, batches=5, seed=0, jobs=2,
                pool_workers=(1, 2), cluster="local", json=str(tmp_path / "p.json"), plot=str(tmp_path / "p.png"))
    return argparse.Namespace(**{**base, **kw})


def test_the_figures_the_json_and_the_plot(monkeypatch, tmp_path):
    _fake(monkeypatch)
    lines = []
    assert bench_pool.cmd_pool(_args(tmp_path), lines.append) == 0
    out = json.loads((tmp_path / "p.json").read_text())
    strong2 = next(p for p in out["points"] if p["scaling"] == "strong" and p["devices"] == 2)
    assert strong2["cycles_per_batch"] == 1000 and strong2["switch_latency"] == 10
    assert abs(strong2["checkpoint_overhead"] - 1000 / 900 + 1) < 1e-12
    assert strong2["samples_per_sim_s"] == 32 * 250e6 / 1000
    assert [w["workers"] for w in out["workers"]] == [1, 2] and out["same_cycles_any_workers"]
    assert (tmp_path / "p.png").stat().st_size > 10_000
    assert any("cycles the same for any number of simulators: yes" in line for line in lines)


def test_cycles_that_depend_on_the_workers_fail_the_command(monkeypatch, tmp_path):
    _fake(monkeypatch, cycles_by_workers={1: 5000, 2: 5001})
    lines = []
    assert bench_pool.cmd_pool(_args(tmp_path), lines.append) == 1
    assert any("any number of simulators: NO" in line for line in lines)

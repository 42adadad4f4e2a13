"""The ladder's command line and the analysis of a run's measured window."""

import pytest

from trainingcxl.host.protocol.run_record import TrainRecord, Window
from trainingcxl.host.tools.ladder import WORKLOADS, analyse_run
from trainingcxl.host.cli import build_parser, main
from trainingcxl.host.model.energy import DEFAULT_ENERGY, link_bytes
from trainingcxl.host.protocol.systems import SYSTEMS, system

COUNTERS = ("cycles lookup_busy lookup_lines lookup_bags lookup_overflows pmem_reads pmem_writes "
            "cache_reads cache_writes mem_errors update_busy update_lines update_forwarded "
            "lookup_log_holds log_records log_full ckpt_stalls log_barrier recover_cycles "
            "snapshot_lines lookup_stalls update_stalls pmem_reads_data pmem_reads_log "
            "pmem_reads_snapshot pmem_writes_data pmem_writes_log pmem_writes_snapshot "
            "link_to_device link_to_device_data link_to_host link_to_host_data").split()


def record(**counts):
    c = dict.fromkeys(COUNTERS, 0)
    c.update(counts)
    host = {"gpu_busy_cycles": 4000, "copy_bytes_device_link": 0, "gpu_copy_bytes": 0,
            "phase_gpu": 4000, "phase_update": 2000}
    return train_record(window=Window(batches=2, first_batch=2, last_batch=3, cycles=10_000,
                                      counters=c, host=host))


def train_record(**fields):
    """A run's record with ``fields``, the rest made up."""
    return TrainRecord(batches=3, system="cxl", staleness=1, relaxed=False, checkpointing=True,
                       gpu_cycles_per_batch=0, **fields)


def test_a_window_becomes_figures_per_batch():
    cfg = WORKLOADS["embedding-heavy"].config
    rec = record(pmem_reads=300, pmem_writes=100, pmem_writes_data=60, pmem_writes_log=30,
                 pmem_writes_snapshot=10, link_to_device=50, link_to_device_data=20,
                 link_to_host=70, link_to_host_data=40, lookup_lines=200, update_lines=60)
    fig = analyse_run(cfg, "cxl", rec)
    assert fig["cycles_per_batch"] == 5000
    assert fig["pmem_bytes_written_per_batch"] == {"data": 60 * 32, "log": 30 * 32,
                                                   "snapshot": 10 * 32, "total": 100 * 32}
    assert fig["link_bytes_per_batch"] == link_bytes(60, 60) / 2
    assert fig["phases_per_batch"] == {"gpu": 2000, "update": 1000}
    assert fig["energy_per_batch_j"] == pytest.approx(fig["energy_breakdown_per_batch_j"]["total"])
    e = fig["energy_breakdown_per_batch_j"]
    assert e["pmem_write"] == pytest.approx(50 * DEFAULT_ENERGY.pmem_write_nj_per_line * 1e-9)
    # The device systems' host CPU idles for the whole batch, and does no software work.
    assert e["host_cpu"] == 0
    assert e["host_cpu_idle"] == pytest.approx(5000 * 4e-9 * DEFAULT_ENERGY.host_cpu_idle_w)


def test_a_window_pays_for_the_writes_the_buffer_had_not_drained():
    """Behind the energy-backed buffer a window that ends with more lines waiting for the
    media than it began with is charged the media's time for them (and one that drained
    lines taken before it is credited them): the buffer moves writes, it does not hide
    them."""
    cfg = WORKLOADS["embedding-heavy"].config
    lines, per = cfg.pmem.write_rate
    assert analyse_run(cfg, "cxl", record(pmem_backlog=300))["cycles_per_batch"] == \
        pytest.approx((10_000 + 300 * per / lines) / 2)
    assert analyse_run(cfg, "cxl", record(pmem_backlog=-100))["cycles_per_batch"] == \
        pytest.approx((10_000 - 100 * per / lines) / 2)
    assert analyse_run(cfg, "cxl", record())["cycles_per_batch"] == 5000


def test_host_pmem_counts_its_media_accesses_and_its_cpu():
    """host-pmem's CPU reaches the media on its own bus: the device's counters see nothing,
    the host's counts are its PMEM traffic, and the CPU's working cycles cost its power."""
    cfg = WORKLOADS["embedding-heavy"].config
    rec = record()
    rec.window.host.update(pmem_reads=300, pmem_writes=100, pmem_writes_data=60,
                                 pmem_writes_log=30, pmem_writes_snapshot=10,
                                 host_cpu_cycles=3000, gpu_copy_bytes=640)
    fig = analyse_run(cfg, "host-pmem", rec)
    assert fig["pmem_bytes_written_per_batch"] == {"data": 60 * 32, "log": 30 * 32,
                                                   "snapshot": 10 * 32, "total": 100 * 32}
    assert fig["pmem_bytes_read_per_batch"] == 300 * 32
    e = fig["energy_breakdown_per_batch_j"]
    # Above idle for the 1,500 cycles a batch it works, idle for all 5,000 of the batch.
    m = DEFAULT_ENERGY
    assert e["host_cpu"] == pytest.approx(1500 * 4e-9 * (m.host_cpu_w - m.host_cpu_idle_w))
    assert e["host_cpu_idle"] == pytest.approx(5000 * 4e-9 * m.host_cpu_idle_w)
    assert e["host_cpu"] + e["host_cpu_idle"] == pytest.approx(
        1500 * 4e-9 * m.host_cpu_w + 3500 * 4e-9 * m.host_cpu_idle_w)
    assert e["link"] == pytest.approx(320 * 8 * DEFAULT_ENERGY.link_pj_per_bit * 1e-12)


def test_near_data_counts_its_copies_not_its_local_cache_traffic():
    cfg = WORKLOADS["embedding-heavy"].config
    rec = record(link_to_device=30, link_to_device_data=10, link_to_host=30, link_to_host_data=10,
                 cache_reads=10, cache_writes=10)
    rec.window.host["copy_bytes_device_link"] = 6400
    near = analyse_run(cfg, "near-data", rec)
    rec.window.host["copy_bytes_device_link"] = 0
    cxl = analyse_run(cfg, "cxl-d", rec)
    # The cache traffic (20 data lines, 30 requests and responses) stays on the device;
    # 10 CXL.mem messages and the copies cross the link.
    assert near["link_bytes_per_batch"] == (link_bytes(0, 10) + 6400) / 2
    assert cxl["link_bytes_per_batch"] == link_bytes(20, 40) / 2


def test_systems_are_named_and_ordered():
    assert list(SYSTEMS) == ["host-pmem", "host-pmem-k", "pmem", "near-data", "cxl-d", "cxl-b", "cxl"]
    with pytest.raises(ValueError, match="choose one of"):
        system("dram")


@pytest.mark.parametrize("argv, why", [
    (["bench", "--systems", "cxl,foo"], "unknown foo"),
    (["bench", "--workloads", ""], "empty list"),
    (["bench", "--batches", "2"], "at least 3"),
    (["train", "--system", "cxl9"], "invalid choice"),
])
def test_bad_bench_and_system_options_are_refused(argv, why, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    assert why in capsys.readouterr().err


def test_train_refuses_failures_it_cannot_inject():
    with pytest.raises(SystemExit, match="need checkpointing"):
        main(["train", "--config", "tiny", "--no-checkpoint", "--inject-failures", "1"])
    with pytest.raises(SystemExit, match="has no 'log' phase"):
        main(["train", "--config", "tiny", "--system", "cxl", "--fail-in", "log"])


def test_the_loader_benchmark_prints_lines_per_second(tmp_path, capsys):
    import json
    out = tmp_path / "loader.json"
    assert main(["bench", "--loader", "--loader-lines", "3000", "--json", str(out)]) == 0
    assert "lines/s" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["lines"] == 3000 and result["load_lines_per_s"] > 0 and result["bytes"] > 3000 * 100


def test_set_changes_every_workloads_configuration():
    from trainingcxl.host.tools.ladder import overridden
    got = overridden(list(WORKLOADS.values()), ["host_pmem.cores=6"])
    assert [w.config.host_pmem.cores for w in got] == [6, 6]
    assert [w.config.hardware_digest() for w in got] == \
        [w.config.hardware_digest() for w in WORKLOADS.values()]
    # A media profile for the whole ladder, before the assignments.
    optane = overridden(list(WORKLOADS.values()), ["host_pmem.cores=6"], "optane")
    assert [w.config.media_profile for w in optane] == ["optane", "optane"]
    assert [w.config.host_pmem.cores for w in optane] == [6, 6]
    with pytest.raises(SystemExit, match="--set: 'host_pmem.speed': no field"):
        overridden(list(WORKLOADS.values()), ["host_pmem.speed=2"])


def test_the_table_compares_with_each_baseline_it_has():
    from trainingcxl.host.tools.ladder import table as _table
    fig = {"cycles_per_batch": 100.0, "checkpoint_overhead": 0.5, "link_bytes_per_batch": 0.0,
           "pmem_bytes_written_per_batch": {"total": 640.0}, "energy_per_batch_j": 0.002}
    lines = []
    _table("w", {"cxl": {**fig, "speedup_vs_pmem": 1.5, "energy_saving_vs_pmem": 0.25}}, lines.append)
    row = lines[-1].split()
    # No host-pmem in the run: '-', not 0 or a bare 'x'.
    assert row[-4:] == ["-", "1.50x", "-", "25.0%"]
    # No bounds in these figures: '-' for each.
    assert row[3:6] == ["-", "-", "-"]


def test_the_ladder_figures_hold_both_bounds_and_the_lines_written_per_row():
    """A window of 2 batches that wrote 120 lines over 40 distinct rows: 3 lines a row,
    and each bound as a share of the measured 5,000 cycles a batch."""
    from trainingcxl.host.model.bound import WindowBound
    from trainingcxl.host.tools.ladder import add_bounds, table as _table
    cfg = WORKLOADS["embedding-heavy"].config
    fig = analyse_run(cfg, "cxl", record(pmem_writes=120, pmem_writes_data=40))
    add_bounds(fig, WindowBound(batches=2, rows=40, cycles=2000.0, floor_cycles=1500.0))
    assert (fig["bound_cycles"], fig["fraction_of_bound"]) == (2000.0, 0.4)
    assert (fig["floor_cycles"], fig["fraction_of_floor"]) == (1500.0, 0.3)
    assert fig["write_lines_per_row"] == 3.0
    lines = []
    _table("w", {"cxl": fig}, lines.append)
    assert lines[-1].split()[3:6] == ["40.0%", "30.0%", "3.00"]

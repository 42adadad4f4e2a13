"""The configuration ladder (host/protocol/systems.py): every system trains bit-exactly and recovers
from power failures, does its embedding work and checkpoints where it says it does, and
the RTL link and region counters see that traffic."""


import pytest

from trainingcxl.spec.presets import PRESETS
from trainingcxl.host.protocol.systems import SYSTEMS
from trainingcxl.host.apps.launch import launch
from trainingcxl.host.jobs import CAMPAIGN_SYSTEM, TrainJob

pytestmark = pytest.mark.cocotb
CONFIG = PRESETS["tiny"]


def train(sim, tmp_path, name, **args):
    job = TrainJob(seed=5, batches=4, batch_size=8, check_every=2, system=CAMPAIGN_SYSTEM,
                   test_samples=0).replace(**args)
    return launch(job, CONFIG, sim=sim, name=f"systems-{name}").to_dict()


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_every_system_trains_and_recovers(name, tmp_path):
    """A failure in batch 3's update and another during its recovery: every system comes
    back to batch 2 and finishes in step with the golden model."""
    s = SYSTEMS[name]
    # The host of pmem pools and updates on the GPU before its first write of the update,
    # the CPU of host-pmem receives the gradients and persists the undo records first;
    # with a logging pass of its own the update first waits for those records and the
    # ring header to persist (until then no row has changed and nothing is rolled back).
    # The software recovery of host-pmem reads a few lines at the media's latency: the
    # second failure strikes early enough to be inside it. host-pmem-k persisted its undo
    # records during the GPU step: its update is the rows alone, over sooner. The host of
    # pmem writes its records through the device's energy-backed buffer, acknowledged
    # in 16 cycles: its rows change from about 850 cycles into the update. (A logging
    # pass's records, too, are persistent once the buffer has them.)
    offset = (200 if s.early_log else 1100 if s.host_bus else 900 if not s.engines
              else 300 if s.log_pass else 60)
    again = 100 if s.host_bus else 250
    rec = train("verilator", tmp_path, name, system=name, relaxed=s.relaxed, staleness=s.staleness,
                measure_from=2, failures=[{"phase": "update", "batch": 3, "offset": offset},
                                          {"phase": "recovery", "offset": again}])
    assert rec["golden_match"] and not rec.get("aborted")
    (f,) = rec["failures"]
    assert f["consistent"] and f["failures_during_recovery"] == 1
    assert f["recovered_batch"] == 2 and f["rolled_back"] > 0
    c, host = rec["counters"], rec["host"]
    # Every system writes undo records before the rows: into the log region (on the
    # device, behind its energy-backed buffer, which keeps them: counted apart).
    if s.host_bus:
        assert host["pmem_writes_log"] > 0
    else:
        assert CONFIG.buffer_size and c["pmem_writes_buffered"] > 0 == c["pmem_writes_log"]
    if s.host_bus:
        # The CPU did it all on its memory bus: nothing crossed the device's link or
        # went through its PMEM controller; the GPU only received pooled vectors.
        assert c["pmem_reads"] == c["pmem_writes"] == 0
        assert c["link_to_host"] == c["link_to_device"] == 0
        assert host["pmem_reads"] > 0 and host["pmem_writes_data"] > 0
        assert host["host_cpu_cycles"] > 0 and host["gpu_copy_bytes"] > 0
        assert host["host_line_ops"] == 0 and host["gpu_embedding_cycles"] == 0
    elif not s.engines:
        # The host did the embedding work over CXL.mem; the engines did nothing.
        assert c["lookup_lines"] == 0 and c["update_lines"] == 0 and c["cache_reads"] == 0
        assert c["link_to_host_data"] >= c["pmem_reads_data"] > 0
        assert host["host_line_ops"] > 0 and host["gpu_embedding_cycles"] > 0
        assert host["host_cpu_cycles"] > 0
    else:
        assert c["lookup_lines"] > 0 and c["update_lines"] > 0 and c["log_records"] > 0
        assert c["link_to_device_data"] > 0 and c["link_to_host_data"] > 0
        assert c["log_busy"] > 0 and c["snapshot_busy"] > 0
    assert (host.get("phase_log", 0) > 0) == s.log_pass
    assert (host["copy_bytes_device_link"] > 0) == (s.engines and not s.coherent)
    assert rec["relaxed"] == s.relaxed and rec["staleness"] == s.staleness
    w = rec["window"]
    assert w["batches"] >= 1 and w["cycles"] > 0


def test_without_checkpointing_nothing_is_logged_or_snapshotted(tmp_path):
    rec = train("verilator", tmp_path, "off", system="cxl", relaxed=True, staleness=1,
                checkpointing=False)
    assert rec["golden_match"]
    c = rec["counters"]
    assert c["log_records"] == 0 and c["snapshot_lines"] == 0
    assert c["pmem_writes_log"] == 0 and c["pmem_writes_snapshot"] == 0
    assert c["log_busy"] == 0 and c["snapshot_busy"] == 0
    assert c["update_lines"] > 0


def test_near_data_on_icarus(tmp_path):
    """Icarus runs the system with the most host-side steps (copies, the logging pass)."""
    rec = train("icarus", tmp_path, "near-data-icarus", system="near-data", batches=2,
                batch_size=4, failures=[{"phase": "log", "batch": 2, "offset": 30}])
    assert rec["golden_match"]
    (f,) = rec["failures"]
    assert f["consistent"] and f["recovered_batch"] == 1


def test_host_pmem_costs_follow_its_constants(tmp_path):
    """A slower CPU makes host-pmem's batches longer, more cores make them shorter; the
    model trains the same either way."""
    def cycles(cfg, name):
        job = TrainJob(seed=5, batches=3, batch_size=8, check_every=3, system="host-pmem",
                       measure_from=2, test_samples=0)
        rec = launch(job, cfg, name=f"host-pmem-{name}").to_dict()
        assert rec["golden_match"]
        return rec["window"]["cycles"], rec["loss"]
    base, loss = cycles(CONFIG, "base")
    slow, slow_loss = cycles(CONFIG.with_overrides(["host_pmem.cores=1"]), "slow")
    wide, _ = cycles(CONFIG.with_overrides(["host_pmem.cores=1000"]), "wide")
    assert slow > base > wide and slow_loss == loss


def test_host_pmem_k_recovers_to_its_snapshot_plus_k(tmp_path):
    """host-pmem-k's snapshot of batch 2 is persisted during batch 3's GPU step, after
    batch 3's undo records: a failure in the middle of it finds batch 2 committed but the
    newest whole snapshot that of batch 0, so D = min(2, 0 + K) = 1 and the committed
    batch 2 is rolled back with batch 3's records, as the device's relaxed snapshots do."""
    rec = train("verilator", tmp_path, "host-pmem-k-snapshot", system="host-pmem-k",
                staleness=1, failures=[{"phase": "gpu", "batch": 3, "offset": 1200}])
    assert rec["golden_match"] and not rec.get("aborted")
    (f,) = rec["failures"]
    assert f["consistent"] and f["durable_before"] == 1
    assert (f["recovered_batch"], f["recovered_mlp_batch"]) == (1, 0)
    assert f["rolled_back"] > 0

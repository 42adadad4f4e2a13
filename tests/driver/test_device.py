"""The cocotb integration tests, each run under both simulators.

The device is converted and compiled once per simulator and configuration
(cached under .cache/); each test below starts the simulator on one cocotb
test of ``bench_device.py`` beside it, whose docstrings say what they check.
"""

import pytest

from trainingcxl.spec.presets import PRESETS
from trainingcxl.sim.runner import _INTERMEDIATES, build, run_bench

BENCH = "bench_device"
CONFIG = PRESETS["tiny"]

pytestmark = pytest.mark.cocotb


def test_a_finished_build_keeps_no_compiler_intermediates():
    """Verilator's precompiled headers are 150 MB a build: the suite's dozens of
    configurations must not fill the disk with them."""
    bdir = build("verilator", CONFIG)
    left = [p.name for pattern in _INTERMEDIATES for p in bdir.glob(pattern)]
    assert not left, left
    assert sum(p.stat().st_size for p in bdir.iterdir()) < 20e6


def test_identity_and_registers(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_identity_and_registers")


def test_cxl_mem_random_traffic(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_cxl_mem_random_traffic", args={"seed": 11})


def test_backdoor_agrees_with_cxl_mem(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_backdoor_agrees_with_cxl_mem")


def test_bulk_cxl_mem_agrees_with_the_media(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_bulk_cxl_mem_agrees_with_the_media")


def test_cxl_mem_refusals(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_cxl_mem_refusals")


def test_power_fail_drops_queued_writes(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_power_fail_drops_queued_writes")


def test_lookup(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_lookup_matches_golden",
              args={"seed": 5, "batches": 3, "batch_size": 4})


def test_lookup_refuses_bad_descriptors(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_lookup_refuses_bad_descriptors")


def test_host_memory_faults_fail_the_descriptor(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_host_memory_faults_fail_the_descriptor")


def test_stream_monitor_flags_protocol_breaches(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_stream_monitor_flags_protocol_breaches")


def test_update(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_update_matches_golden",
              args={"seed": 3, "batches": 2, "batch_size": 4})


def test_relaxed_lookup_matches_strict(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_relaxed_lookup_matches_strict",
              args={"seed": 6, "batches": 4, "batch_size": 4})


def test_relaxed_lookup_overflows_its_deferred_list():
    run_bench("verilator", CONFIG, BENCH, testcase="test_relaxed_lookup_overflows_its_deferred_list")

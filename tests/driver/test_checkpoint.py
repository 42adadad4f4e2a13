"""The checkpoint engine's rules on the whole device, under both simulators
(``bench_checkpoint.py`` beside it)."""

import pytest

from trainingcxl.spec.presets import PRESETS
from trainingcxl.sim.runner import run_bench

BENCH = "bench_checkpoint"
CONFIG = PRESETS["tiny"]

pytestmark = pytest.mark.cocotb


def test_recover_rolls_back_what_is_not_durable(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_recover_rolls_back_what_is_not_durable",
              args={"seed": 1, "batch_size": 4})


def test_checkpoint_rules_refuse_bad_requests(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_checkpoint_rules_refuse_bad_requests")


def test_host_faults_during_update_and_snapshot(sim):
    run_bench(sim, CONFIG, BENCH, testcase="test_host_faults_during_update_and_snapshot")

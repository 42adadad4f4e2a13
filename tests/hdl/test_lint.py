"""The generated Verilog passes Verilator's lint (default warning set) without a warning."""

import subprocess

import pytest

from trainingcxl.spec.config import Config
from trainingcxl.spec.presets import PRESETS
from trainingcxl.sim.runner import verilog_for
from trainingcxl.sim.toolchain import setup_verilator


@pytest.mark.slow
@pytest.mark.parametrize("config", [PRESETS["tiny"], Config(tables=(16, 8, 8), dim=32, max_bags=64)],
                         ids=["tiny", "dim32"])
def test_verilator_lint_is_clean(config):
    setup_verilator()
    path = verilog_for(config)
    done = subprocess.run(["verilator", "--lint-only", str(path)], capture_output=True, text=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "%Warning" not in output and "%Error" not in output, output[:4000]

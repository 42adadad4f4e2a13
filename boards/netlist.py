"""What a synthesized ECP5 netlist (Yosys's JSON, the one nextpnr places) says before
place and route: the resources of each block, and how many LUTs deep each register's
input is.

On a congested FPGA a path's delay is mostly routing, about one hop per logic
level, so the levels between two registers predict the clock: synthesis takes
minutes, place and route of the 85F a quarter of an hour.
"""

from collections import Counter

__all__ = ["BLOCK_DEPTH", "block_of", "path_record", "utilisation_by_block", "logic_levels",
           "with_settings"]


def _top(netlist):
    return next((m for m in netlist["modules"].values() if m.get("attributes", {}).get("top")),
                None) or next(iter(netlist["modules"].values()))


def with_settings(netlist, settings):
    """``netlist`` with nextpnr ``settings`` (name -> value) in its top module, where
    nextpnr reads its settings from: the tuning that has no command-line option (router2's
    congestion weights and bounding box margins, ``common/route/router2.cc``)."""
    _top(netlist).setdefault("settings", {}).update({k: str(v) for k, v in settings.items()})
    return netlist


#: What each ECP5 cell of the synthesized netlist takes: LUT4 sites (a carry
#: cell is two), flip-flops, LUT RAM cells, block RAMs, DSP multipliers.
_CELL_USE = {"LUT4": ("luts", 1), "CCU2C": ("luts", 2), "TRELLIS_FF": ("ffs", 1),
             "TRELLIS_DPR16X4": ("lutram", 1), "DP16KD": ("block_ram", 1),
             "MULT18X18D": ("dsp", 1)}
#: Levels of hierarchy the utilisation report keeps (deeper cells count toward their
#: block at this level).
BLOCK_DEPTH = 4


def block_of(cell_name, depth=BLOCK_DEPTH):
    """The block a cell of the flattened netlist belongs to: the hierarchical part of its
    name (Yosys names a mapped cell after the net it drives, and a net after the module
    that declares it), at most ``depth`` levels, a level repeated by a wrapper once."""
    parts = cell_name.split(".")[:-1]
    out = []
    for p in parts:
        if not out or out[-1] != p:
            out.append(p)
    return ".".join(out[:depth]) or "(top)"


def path_record(start, end, delay_ns, routing_ns, levels):
    """A path of a build's report: start and end cell, their blocks, the delay and how
    much of it is logic and routing, and the cells it passes."""
    return {"start": start, "end": end, "start_block": block_of(start), "end_block": block_of(end),
            "delay_ns": round(delay_ns, 2), "logic_ns": round(delay_ns - routing_ns, 2),
            "routing_ns": round(routing_ns, 2), "levels": levels}


def utilisation_by_block(netlist, depth=BLOCK_DEPTH):
    """LUT sites, flip-flops, LUT RAM and block RAM of each block of Yosys's JSON
    ``netlist`` (the flattened design nextpnr places), largest first.

    A cell at a block's boundary counts toward the block that names the net it
    drives (usually the one that declares the register or output), so the
    shares are close, not exact.
    """
    top = _top(netlist)
    blocks = {}
    for name, cell in top["cells"].items():
        use = _CELL_USE.get(cell["type"])
        if use is None:
            continue
        counts = blocks.setdefault(block_of(name, depth), dict.fromkeys(
            ("luts", "ffs", "lutram", "block_ram", "dsp"), 0))
        counts[use[0]] += use[1]
    return [{"block": b, **c} for b, c in sorted(blocks.items(),
                                                  key=lambda kv: (-kv[1]["luts"], kv[0]))]



#: Cells whose outputs start a path and whose inputs end one (their data is registered).
_REGISTERS = {"TRELLIS_FF", "DP16KD", "TRELLIS_IO", "IFS1P3DX", "OFS1P3DX", "ODDRX1F",
              "IDDRX1F", "EHXPLLL", "DCCA", "SGSR", "MULT18X18D"}
#: Combinational cells that add a level. The wide multiplexers (PFUMX, L6MUX21) sit
#: in the slice of the LUTs they combine and a carry moves along its own chain:
#: both add none.
_LEVEL = {"LUT4": 1, "CCU2C": 1, "TRELLIS_DPR16X4": 1}


def logic_levels(netlist, count=5):
    """The levels of logic in front of every register input of ``netlist`` (Yosys JSON).

    Returns ``{"histogram": {levels: inputs}, "deepest": [...]}``: how many
    register inputs (flip-flops, block RAM, LUT RAM writes) are how deep, and
    the ``count`` deepest paths, one per pair of start and end block, each
    with its start and end cell. A LUT RAM's read is combinational, so its
    read address is a path through it, its write side an end.
    """
    cells = _top(netlist)["cells"]
    driver = {}                                 # net bit -> driving cell
    for name, cell in cells.items():
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) == "output":
                for b in bits:
                    if isinstance(b, int):
                        driver[b] = name

    def inputs(cell, through):
        """``(net bit, adds a level)`` for the inputs of ``cell`` a combinational output
        depends on (``through``), or for those a register stores."""
        lutram = cell["type"] == "TRELLIS_DPR16X4"
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) != "input":
                continue
            if lutram and port.startswith("RAD") != through:
                continue
            step = 0 if cell["type"] == "CCU2C" and port == "CIN" else 1
            yield from ((b, step) for b in bits if isinstance(b, int))

    # Depth of each combinational cell's output, in dependency order (no recursion:
    # paths are thousands of cells long in a carry chain).
    depth, via = {}, {}
    for root in cells:
        if cells[root]["type"] in _REGISTERS or root in depth:
            continue
        stack = [(root, False)]
        while stack:
            name, ready = stack.pop()
            if name in depth:
                continue
            cell = cells[name]
            preds = [(driver.get(b), step) for b, step in inputs(cell, True)]
            preds = [(p, s) for p, s in preds if p is not None and cells[p]["type"] not in _REGISTERS]
            if not ready:
                depth_pending = [p for p, _ in preds if p not in depth]
                if depth_pending:
                    stack.append((name, True))
                    stack.extend((p, False) for p in depth_pending)
                    continue
            # From a register, the cell's own level; from a cell before it, that
            # cell's depth plus it (none along a carry chain).
            level = _LEVEL.get(cell["type"], 0)
            best, best_from = level, None
            for p, step in preds:
                d = depth.get(p, 0) + (level if step else 0)
                if d > best:
                    best, best_from = d, p
            depth[name], via[name] = best, best_from

    def start_of(name):
        while via.get(name) is not None:
            name = via[name]
        # The register that drives the first cell of the path.
        for b, _ in inputs(cells[name], True):
            d = driver.get(b)
            if d is not None and cells[d]["type"] in _REGISTERS:
                return d
        return name

    histogram = Counter()
    ends = []
    for name, cell in cells.items():
        if cell["type"] not in _REGISTERS and cell["type"] != "TRELLIS_DPR16X4":
            continue
        deepest, src = 0, None
        for b, _ in inputs(cell, False):
            d = driver.get(b)
            if d is not None and cells[d]["type"] not in _REGISTERS and depth.get(d, 0) > deepest:
                deepest, src = depth[d], d
        histogram[deepest] += 1
        if src is not None:
            ends.append((deepest, name, src))
    ends.sort(key=lambda e: -e[0])
    deepest, seen = [], set()
    for levels, end, src in ends:
        start = start_of(src)
        key = (block_of(start), block_of(end))
        if key in seen:
            continue
        seen.add(key)
        deepest.append({"levels": levels, "start": start, "end": end,
                        "start_block": key[0], "end_block": key[1]})
        if len(deepest) == count:
            break
    return {"histogram": dict(sorted(histogram.items())), "deepest": deepest}

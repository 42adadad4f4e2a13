"""The behavioural CRC network (hdl/checkpoint/crc.v) computes the host's CRC.

The simulators' netlist replaces every CRC network by this module: Icarus
evaluates it from the masks the Python computes, Verilator through the C of
``sim/dpi/crc32c.cpp`` (which also caches the last inputs). Both are checked
against :func:`trainingcxl.spec.records.crc_update` on unit vectors (the CRC
is linear, so those pin every tap) and random ones, for every part width.
"""

import random
import subprocess

import pytest

from trainingcxl.hdl.checkpoint.crc import VERILOG, _masks
from trainingcxl.sim.runner import DPI_SOURCES
from trainingcxl.sim.toolchain import setup_verilator
from trainingcxl.spec.config import LINE_BITS
from trainingcxl.spec.records import crc_update

WIDTHS = (LINE_BITS, LINE_BITS // 8)
CRC_C = next(path for path in DPI_SOURCES if path.name == "crc32c.cpp")


def _run(cmd, cwd):
    """Run ``cmd``; its output, or a failure that shows what the tool said."""
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, f"{cmd[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _vectors(width):
    rng = random.Random(width)
    vecs = [(1 << j, 0) for j in range(32)] + [(0, 1 << i) for i in range(width)]
    vecs += [(rng.getrandbits(32), rng.getrandbits(width)) for _ in range(64)]
    # The same inputs twice in a row, then one bit changed: the cache must notice.
    state, data = rng.getrandbits(32), rng.getrandbits(width)
    vecs += [(state, data), (state, data), (state, data ^ (1 << (width - 1)))]
    return vecs


def _testbench(width, vectors):
    bits = 32 + width
    masks = sum(mask << (k * bits) for k, mask in enumerate(_masks(width)))
    lines = [
        "module tb;",
        "  reg [31:0] state; reg [%d:0] data; wire [31:0] crc;" % (width - 1),
        "  tcxl_crc #(.WIDTH(%d), .MASKS(%d'h%x)) dut(.state(state), .data(data), .crc(crc));"
        % (width, 32 * bits, masks),
        "  initial begin",
    ]
    for state, data in vectors:
        lines.append("    state = 32'h%x; data = %d'h%x; #1 $display(\"%d %%08x\", crc);"
                     % (state, width, data, width))
    lines += ["    $finish;", "  end", "endmodule"]
    return "\n".join(lines) + "\n"


def _expect(vectors, width):
    return [crc_update(state, data, width // 8) for state, data in vectors]


def _outputs(text, width):
    """The CRCs the testbench of ``width`` printed, in order."""
    pairs = (line.split() for line in text.splitlines())
    return [int(p[1], 16) for p in pairs if len(p) == 2 and p[0] == str(width)]


@pytest.mark.parametrize("width", WIDTHS)
def test_icarus_model_is_the_crc(tmp_path, width):
    vectors = _vectors(width)
    (tmp_path / "tb.v").write_text(_testbench(width, vectors))
    _run(["iverilog", "-g2012", "-o", "tb.vvp", "tb.v", str(VERILOG)], tmp_path)
    out = _run(["vvp", "-n", "tb.vvp"], tmp_path)
    assert _outputs(out, width) == _expect(vectors, width)


@pytest.mark.slow
def test_verilator_model_is_the_crc(tmp_path):
    setup_verilator()
    expect, sources = {}, []
    for width in WIDTHS:
        vectors = _vectors(width)
        expect[width] = _expect(vectors, width)
        text = _testbench(width, vectors).replace("module tb;", f"module tb{width};")
        text = text.replace("    $finish;\n", "")
        (tmp_path / f"tb{width}.v").write_text(text)
        sources.append(f"tb{width}.v")
    # Both widths in one model: two CRC instances, each with its own cache.
    (tmp_path / "top.v").write_text(
        "module top;\n" + "".join(f"  tb{w} t{w}();\n" for w in WIDTHS)
        + "  initial #100000 $finish;\nendmodule\n")
    _run(["verilator", "--binary", "--timing", "-CFLAGS", "-fcoroutines", "-Wno-fatal",
          "+define+TCXL_DPI", "--top-module", "top", "top.v", *sources, str(VERILOG),
          str(CRC_C), "-o", "tb"], tmp_path)
    out = _run([str(tmp_path / "obj_dir" / "tb")], tmp_path)
    for width in WIDTHS:
        assert _outputs(out, width) == expect[width], width

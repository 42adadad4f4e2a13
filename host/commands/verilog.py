"""``trainingcxl verilog``: the device's Verilog (cached), optionally linted."""

import subprocess
import sys
from pathlib import Path

from .options import config_option

__all__ = ["register"]


def register(sub):
    sp = sub.add_parser("verilog", help="generate the device's Verilog (cached) and optionally lint it")
    config_option(sp, "tiny", device_top=False)
    sp.add_argument("-o", "--output", help="copy the Verilog here")
    sp.add_argument("--lint", action="store_true", help="run verilator --lint-only on it")
    sp.set_defaults(func=run)


def run(args):
    from trainingcxl.sim.runner import verilog_for
    path = verilog_for(args.config, log=lambda t: print(t, file=sys.stderr))
    if args.output:
        Path(args.output).write_text(path.read_text())
        print(args.output)
    else:
        print(path)
    if args.lint:
        from trainingcxl.sim.toolchain import setup_verilator
        setup_verilator()
        done = subprocess.run(["verilator", "--lint-only", str(path)])
        print("lint: clean" if done.returncode == 0 else "lint: warnings (see above)", file=sys.stderr)
        return done.returncode
    return 0

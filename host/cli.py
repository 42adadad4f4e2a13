"""The ``trainingcxl`` command line: one module per command (:mod:`trainingcxl.host.commands`),
each declaring its arguments, building its job, running it and printing its summary.
This module only dispatches."""

import os
import sys

from trainingcxl.host.commands import (bench, bench_lookup, bench_update, build_board, campaign,
                                       formal, fuzz, lookup_demo, make_criteo_sample,
                                       print_config, study, train, verilog)
from trainingcxl.host.commands.options import resolve_config
from trainingcxl.host.jobs import JobError
from trainingcxl.spec.config import ConfigError
from trainingcxl.host.tools.argtypes import DefaultsHelpFormatter, OneLineErrors
from trainingcxl.host.tools.outputs import check_outputs
from trainingcxl.host.tools.provenance import Start

__all__ = ["main", "build_parser", "COMMANDS"]

#: Every command's module, in the order ``--help`` lists them.
COMMANDS = (lookup_demo, bench_lookup, train, campaign, bench, study, build_board,
            make_criteo_sample, bench_update, print_config, verilog, fuzz, formal)


def build_parser():
    p = OneLineErrors(
        prog="trainingcxl",
        description="TrainingCXL on RTL: embedding tables in PMEM behind a CXL controller with "
                    "near-memory compute. Commands build the Amaranth device, simulate it with "
                    "cocotb under Verilator or Icarus, and compare every result with the golden model.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(sub)
    for parser in sub.choices.values():
        parser.formatter_class = DefaultsHelpFormatter
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    start = Start(tuple(argv))
    args = build_parser().parse_args(argv)
    args.start = start
    resolve_config(args)
    # Before anything is built: a run must not end on a path it cannot write.
    check_outputs(args)
    try:
        return args.func(args)
    except (ConfigError, JobError) as e:
        # A configuration or a job it cannot run, found by the command (the checks run
        # before anything is built): the reason in one line.
        raise SystemExit(f"error: {e}") from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`trainingcxl config | head`): stop quietly, and keep
        # Python's own flush at exit from failing on the closed pipe again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())

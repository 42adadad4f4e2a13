"""Options several commands share: the configuration (a preset or a file, and
``--set``), the simulator, and the JSON output."""

import argparse

from trainingcxl.spec.config import ConfigError
from trainingcxl.spec.presets import PRESETS, load_config
from trainingcxl.host.tools.argtypes import add_set_option, nonneg, positive, with_overrides

__all__ = ["config_arg", "config_option", "sim_option", "json_option", "workload_options",
           "pmem_dir_option", "resolve_config", "check_device_top"]


def config_arg(text):
    """argparse type: a preset name or a configuration file."""
    try:
        return load_config(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def config_option(sp, default, device_top=True):
    """``--config`` and ``--set``. ``device_top``: the command simulates the device top,
    which refuses some configurations (``SimTop.check``) before anything is built."""
    sp.add_argument("--config", type=config_arg, default=PRESETS[default],
                    help=f"a preset ({', '.join(PRESETS)}) or a .json/.toml file of "
                         f"configuration fields (default: {default})")
    add_set_option(sp)
    sp.set_defaults(device_top=device_top)


def workload_options(sp, job_class, *extra, defaults=None, **kwargs):
    """``--batches``, ``--batch-size`` and ``--seed`` of ``job_class`` (and the fields
    ``extra``), their defaults and help from the job's declaration."""
    job_class.add_arguments(sp, "batches", "batch_size", "seed", *extra, defaults=defaults,
                            batches={"type": positive}, batch_size={"type": positive},
                            seed={"type": nonneg}, **kwargs)


def sim_option(sp, note="icarus is about 30x slower, use --config tiny"):
    sp.add_argument("--sim", choices=("verilator", "icarus"), default="verilator",
                    help=f"simulator (default: verilator; {note})")


def json_option(sp):
    sp.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT")


def pmem_dir_option(sp):
    sp.add_argument("--pmem-dir", metavar="DIR", default=None,
                    help="keep each training run's PMEM media in a file of DIR named by the "
                         "run (DIR/<run>.pmem, made anew; on a cluster DIR must be shared), "
                         "for trainingcxl.host.pmem.open after the run (docs/pmem.md)")


def resolve_config(args):
    """The configuration a command runs: ``--config`` with ``--set`` applied, checked
    against the device top when the command simulates it."""
    if getattr(args, "set", None) and getattr(args, "config", None) is not None:
        args.config = with_overrides(args.config, args.set)
    if getattr(args, "device_top", False):
        check_device_top(args.config)


def check_device_top(cfg):
    """Stop with a one-line error if the simulated device top cannot run ``cfg``."""
    from trainingcxl.sim.rtl.top import SimTop
    try:
        SimTop.check(cfg)
    except ValueError as e:
        raise SystemExit(f"error: {e}")

"""The options commands share, each declared once: the configuration (a preset or a
file, and ``--set``), the simulator, the JSON output, and the groups of the workload
(``--batches``, ``--batch-size``, ``--seed``), the staleness bound, the pool
(``--devices``), the media files and the fan-out (``--cluster``, ``--jobs``).

A command takes a group whole and may give it its own defaults and a sharper help
text; the option's name, type and meaning stay here (or in the job's field, whose
help and default :meth:`~trainingcxl.host.jobs.Job.add_arguments` reads).
"""

import argparse
import dataclasses

from trainingcxl.spec.config import ConfigError
from trainingcxl.spec.presets import PRESETS, load_config
from trainingcxl.host.jobs import TrainJob
from trainingcxl.host.tools.argtypes import add_set_option, nonneg, positive, with_overrides
from trainingcxl.host.tools.plans import staleness

__all__ = ["config_arg", "config_option", "sim_option", "json_option", "workload_options",
           "staleness_option", "devices_option", "with_devices", "pmem_dir_option",
           "cluster_options", "resolve_config", "check_device_top", "int_list"]


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


def workload_options(sp, job_class=TrainJob, *extra, names=("batches", "batch_size", "seed"),
                     defaults=None, helps=None, **kwargs):
    """``--batches``, ``--batch-size`` and ``--seed`` (or those of ``names``) of
    ``job_class``, and its fields ``extra``: their defaults and help from the job's
    declaration; ``defaults`` and ``helps`` (by field name) are the command's own, and
    ``kwargs`` (by field name) argparse keywords such as ``type``."""
    types = {"batches": {"type": positive}, "batch_size": {"type": positive},
             "seed": {"type": nonneg}}
    for name, words in kwargs.items():
        types[name] = {**types.get(name, {}), **words}
    for name, text in (helps or {}).items():
        types[name] = {**types.get(name, {}), "help": text}
    job_class.add_arguments(sp, *names, *extra, defaults=defaults, **types)


def int_list(low=1):
    """argparse type: ``1,2,4`` -> a tuple of integers of at least ``low``."""
    def parse(text):
        try:
            values = tuple(int(t) for t in text.split(",") if t.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected integers such as 1,2,4") from None
        if not values or min(values) < low:
            raise argparse.ArgumentTypeError(f"{text!r}: expected integers of at least {low}")
        return values
    return parse


def _staleness_list(text):
    return [staleness(k) for k in text.split(",")]


def staleness_option(sp, *, many=False, default=None, help=None):
    """``--staleness``: the staleness bound K as the job declares it (``many``: a list
    of bounds to mix, ``K[,K...]``)."""
    if many:
        TrainJob.add_arguments(sp, "staleness", defaults={"staleness": default},
                               staleness={"type": _staleness_list, "metavar": "K[,K...]",
                                          "help": help or "staleness bounds K to mix"})
    else:
        extra = {"help": help} if help else {}
        TrainJob.add_arguments(sp, "staleness", defaults={"staleness": default},
                               staleness={"type": staleness, "metavar": "K", **extra})


def devices_option(sp, *, sizes=None, more=""):
    """``--devices``: a pool of N devices behind a CXL switch (docs/pool.md), the
    configuration's ``pool.devices`` (:func:`with_devices`); ``sizes``: the command
    compares pools of several sizes, these by default. ``more``: what the pool means
    to this command."""
    if sizes:
        sp.add_argument("--devices", type=int_list(), default=tuple(sizes),
                        metavar=",".join(map(str, sizes)),
                        help="pool sizes (at most 8, one table each)" + (f"; {more}" if more else ""))
        return
    sp.add_argument("--devices", type=positive, metavar="N", default=None,
                    help="a pool of N devices behind a CXL switch, the tables spread over them "
                         "(the configuration's pool.devices, 1 unless set; docs/pool.md)"
                         + (f": {more}" if more else ""))


def with_devices(config, devices):
    """``config`` with a pool of ``devices`` (``None``: as it is)."""
    if devices is None:
        return config
    return config.replace(pool=dataclasses.replace(config.pool, devices=devices))


def sim_option(sp, note="icarus is about 30x slower, use --config tiny"):
    sp.add_argument("--sim", choices=("verilator", "icarus"), default="verilator",
                    help=f"simulator (default: verilator; {note})")


def json_option(sp, help="write the results as JSON to OUT"):
    sp.add_argument("--json", metavar="OUT", help=help)


def pmem_dir_option(sp):
    sp.add_argument("--pmem-dir", metavar="DIR", default=None,
                    help="keep each training run's PMEM media in a file of DIR named by the "
                         "run (DIR/<run>.pmem, made anew; on a cluster DIR must be shared), "
                         "for trainingcxl.host.pmem.open after the run (docs/pmem.md)")


def cluster_options(sp, *, jobs_default=None, jobs=True, what="the tasks"):
    """``--cluster`` (where ``what`` runs) and ``--jobs`` (how many at once here)."""
    from trainingcxl.host.runs.cluster import parse_cluster
    sp.add_argument("--cluster", type=parse_cluster, default="local", metavar="WHERE",
                    help=f"where {what} run: local (processes of this machine), ray (a "
                         "private Ray instance on this machine), auto (the Ray cluster this "
                         "machine joined with `ray start`) or ray://HOST:PORT (Ray Client); "
                         "every node needs the project installed (docs/usage.md, \"On a cluster\")")
    if jobs:
        default = "all cores" if jobs_default is None else jobs_default
        sp.add_argument("--jobs", type=positive, default=jobs_default,
                        help=f"tasks at once on this machine, for local and ray (default: {default})")


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

"""``trainingcxl make-criteo-sample``: a small Criteo-format TSV with a learnable signal."""

from trainingcxl.host.tools.argtypes import positive
from .options import workload_options

__all__ = ["register"]


def register(sub):
    sp = sub.add_parser("make-criteo-sample", help="write a small Criteo-format TSV with a learnable signal")
    sp.add_argument("output", help="file to write")
    sp.add_argument("--lines", type=positive, default=4096, help="samples")
    workload_options(sp, names=("seed",), helps={"seed": "seed of the samples"})
    sp.set_defaults(func=run)


def run(args):
    from trainingcxl.host.model.criteo import write_sample
    path = write_sample(args.output, lines=args.lines, seed=args.seed)
    print(f"wrote {args.lines} Criteo-format lines to {path}")
    return 0

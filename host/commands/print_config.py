"""``trainingcxl config``: a configuration as JSON, and where its regions lie."""

import json
import sys

from trainingcxl.spec.presets import PRESETS
from .options import config_arg

__all__ = ["register"]


def register(sub):
    sp = sub.add_parser("config", help="print a configuration as JSON")
    sp.add_argument("config", type=config_arg, nargs="?", default=PRESETS["small"],
                    help="preset name or file (default: small)")
    sp.set_defaults(func=run)


def run(args):
    print(json.dumps(args.config.to_dict(), indent=2))
    cfg = args.config
    print(f"# media: {cfg.media_lines} lines ({cfg.media_lines * 64} bytes); tables at line 0, "
          f"log at {cfg.log_base}, commit at {cfg.commit_base}, snapshots at "
          f"{cfg.snapshot_base[0]} and {cfg.snapshot_base[1]}", file=sys.stderr)
    return 0

"""``trainingcxl fuzz``: invalid inputs mixed with checked training, in shards.

The cases are cut into shards of ``--shard-cases``; each shard is one run of
:mod:`trainingcxl.host.apps.fuzz_app` on a fresh device, seeded from the fuzz seed
and its shard number alone, so the tally does not depend on where or on how
many workers the shards ran (:mod:`.cluster`).
"""

import time

from . import report
from .options import config_option
from trainingcxl.host.tools.argtypes import nonneg, positive
from trainingcxl.host.tools.cluster import add_cluster_options, open_cluster
from trainingcxl.host.tools import pool
from trainingcxl.host.jobs import FuzzJob

__all__ = ["shard_seed", "fuzz_shard", "merge_shards", "cmd_fuzz", "register"]

#: The counts of a shard's record that add up over shards.
COUNTS = ("cases", "invalid", "refused", "corruptions", "hangs", "lost_commits", "batches")


def shard_seed(seed, shard):
    """Shard 0 runs on the fuzz seed itself (one shard is the unsharded fuzz), the
    others on seeds no other fuzz seed's shard 0 uses."""
    return seed + (shard << 32)


def fuzz_shard(spec):
    """One shard in its own simulation; returns ``(spec, record or None, error text)``."""
    from trainingcxl.spec.config import Config
    from trainingcxl.host.apps.launch import launch
    from trainingcxl.sim.runner import BenchFailure
    try:
        record = launch(FuzzJob.from_dict(spec["job"]), Config.from_dict(spec["config"]),
                        sim=spec["sim"])
    except BenchFailure as e:
        if e.record is None:
            return spec, None, str(e)[-3000:]
        record = e.record
    return spec, record, None


def merge_shards(results):
    """One record from the shards' (in shard order): counts summed, the inputs not
    refused and the hangs named by shard."""
    merged = {k: 0 for k in COUNTS}
    merged.update(by_kind={}, not_refused=[], hang_notes=[], errors=[],
                  counters={"mem_errors": 0, "descriptor_errors": 0})
    for spec, rec, error in results:
        shard = spec["index"]
        if error or rec is None:
            merged["errors"].append({"shard": shard, "error": error})
            continue
        for k in COUNTS:
            merged[k] += rec[k]
        for kind, n in rec["by_kind"].items():
            merged["by_kind"][kind] = merged["by_kind"].get(kind, 0) + n
        merged["not_refused"] += [{**x, "shard": shard} for x in rec["not_refused"]]
        if rec.get("hang"):
            merged["hang_notes"].append({"shard": shard, "hang": rec["hang"]})
        for k, v in rec["counters"].items():
            merged["counters"][k] += v
    return merged


def cmd_fuzz(args):
    cfg = args.config
    sizes = [min(args.shard_cases, args.cases - first)
             for first in range(0, args.cases, args.shard_cases)]
    specs = [{"index": k, "sim": args.sim, "config": cfg.to_dict(),
              "job": FuzzJob(cases=n, seed=shard_seed(args.seed, k), every=args.every).to_dict()}
             for k, n in enumerate(sizes)]
    print(f"trainingcxl fuzz: {args.cases} invalid inputs (seed {args.seed}) in {len(specs)} "
          f"shard(s), a checked training batch every {args.every}, on {args.sim}", flush=True)
    t0 = time.monotonic()
    with open_cluster(args.cluster, args.jobs) as cluster:
        cluster.prebuild([cfg], sim=args.sim)
        results = sorted(pool.parallel_runs(specs, cluster, lambda r: "", fn=fuzz_shard),
                         key=lambda r: r[0]["index"])
        execution = {"cluster": cluster.name, "workers": cluster.workers}
    rec = merge_shards(results)
    execution["wall_s"] = round(time.monotonic() - t0, 1)
    rec.update({"sim": args.sim, "seed": args.seed, "shards": len(specs),
                "shard_cases": args.shard_cases, "execution": execution})
    print()
    print(f"  invalid inputs   {rec['invalid']} ({', '.join(f'{k} {n}' for k, n in rec['by_kind'].items())})")
    print(f"  refused          {rec['refused']} as specified")
    print(f"  training batches {rec['batches']} between them, checked against the golden model")
    print(f"  corruptions      {rec['corruptions']}   hangs {rec['hangs']}   "
          f"lost commits {rec['lost_commits']}")
    for e in rec["errors"]:
        print(f"  FAILED shard {e['shard']}: {(e['error'] or '')[:300]}")
    print(f"  time             {execution['wall_s']} s on {execution['workers']} workers "
          f"({execution['cluster']})")
    report.json_out(args.json, rec, args=args)
    good = (rec["refused"] == rec["invalid"] == args.cases and not rec["corruptions"]
            and not rec["hangs"] and not rec["lost_commits"] and not rec["errors"])
    return 0 if good else 1


def register(sub):
    sp = sub.add_parser(
        "fuzz", help="send random invalid CXL.mem messages and descriptors between checked "
                     "training batches",
        description="Seeded fuzzing of the simulated device: invalid CXL.mem messages (unmapped, "
                    "protected, poisoned, reused tags, unimplemented opcodes) and descriptors "
                    "(rows out of range, bad offsets, oversized bags, unknown ops, misaligned "
                    "pointers, arrays outside the GPU window, updates without their lookup, "
                    "commits out of order, batches already committed), each checked to be "
                    "refused as specified, "
                    "with a lookup, update and commit checked against the golden model after "
                    "every --every of them and all tables compared at the end. The cases run "
                    "in shards of --shard-cases, each on a fresh device, in parallel. Exit "
                    "status 0 when everything was refused and nothing was corrupted, hung or lost.")
    config_option(sp, "tiny")
    sp.add_argument("--cases", type=positive, default=200, help="invalid inputs to send")
    sp.add_argument("--seed", type=nonneg, default=0)
    sp.add_argument("--every", type=positive, default=10,
                    help="a checked training batch after every N invalid inputs")
    sp.add_argument("--shard-cases", type=positive, default=500,
                    help="invalid inputs per shard, the unit of work a worker takes")
    sp.add_argument("--sim", choices=("verilator", "icarus"), default="verilator")
    add_cluster_options(sp)
    sp.add_argument("--json", metavar="OUT", help="write the results as JSON")
    sp.set_defaults(func=cmd_fuzz)

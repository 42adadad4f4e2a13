"""``trainingcxl formal``: bounded proofs of the stream rule, the write-pending queue
and write-ahead logging with SymbiYosys."""

import sys

from trainingcxl.host.tools.argtypes import positive
from . import report

__all__ = ["register"]


def register(sub):
    sp = sub.add_parser(
        "formal", help="prove the formal properties (stream rule, write-pending queue, "
                       "write-ahead) with SymbiYosys",
        description="Bounded model checks with yowasp-sby and boolector, from reset over every "
                    "input sequence of the proof's depth. Exit status 0 when every proof passes, "
                    "1 when one fails (its counterexample is a VCD trace), 2 on bad arguments.")
    sp.add_argument("--proof", action="append", metavar="NAME",
                    help="run only this proof (repeatable; see --list)")
    sp.add_argument("--depth", type=positive, help="override the proofs' depth in cycles")
    sp.add_argument("--list", action="store_true", help="list the proofs and what each proves")
    sp.add_argument("--work", help="folder for the solver's files (default .cache/formal)")
    sp.add_argument("--json", metavar="OUT", help="write the results as JSON")
    sp.set_defaults(func=run)


def run(args):
    from trainingcxl.sim.formal import PROOFS, FormalError, run_proof
    if args.list:
        for name, proof in PROOFS.items():
            print(f"{name:22s} depth {proof.depth:3d}  {proof.what}")
        return 0
    names = args.proof or list(PROOFS)
    unknown = [n for n in names if n not in PROOFS]
    if unknown:
        print(f"error: unknown proof(s) {', '.join(unknown)}; the proofs are {', '.join(PROOFS)}",
              file=sys.stderr)
        return 2
    results = []
    for k, name in enumerate(names, 1):
        print(f"[{k}/{len(names)}] {name}: bounded model check ...", file=sys.stderr, flush=True)
        try:
            r = run_proof(name, work=args.work, depth=args.depth)
        except FormalError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        results.append(r)
        line = f"{r['status']:5s} {name} (depth {r['depth']}, {r['seconds']} s)"
        if r["status"] != "PASS":
            line += f": {r.get('assertion', 'see ' + r['log'])}"
            if "trace" in r:
                line += f"\n      counterexample: {r['trace']}"
        print(line)
    report.json_out(args.json, {"proofs": results}, args=args)
    return 0 if all(r["status"] == "PASS" for r in results) else 1

"""A training run on a pool of devices: one simulator per device, coupled batch by batch.

:func:`run_pool` starts a simulator process per device of ``Config.pool``
(:mod:`trainingcxl.spec.pool`), each training its tables with the protocol of one
device, and answers their exchanges (:mod:`trainingcxl.host.protocol.pool`): it
gathers every device's pooled vectors and hands them back, and it gives every
device the same GPU start, the latest of theirs. Between two exchanges a device
simulates on its own, so at most ``workers`` simulators run at once and the others
wait for their turn: the cycles, losses and tables are the same for any number of
workers, only the wall time changes.

The run's record is the devices' records merged: the losses (the same on every
device: one GPU trains on all of them), cycles per batch as the slowest device
spent them, counters summed, and each device's own record under ``devices``.
"""

import json
import multiprocessing
import os
import secrets
import tempfile
import time
from multiprocessing.connection import Listener, wait
from pathlib import Path

import numpy as np

from trainingcxl.spec.pool import shards

__all__ = ["run_pool", "merge_records"]

#: Seconds between checks that every simulator process still lives.
POLL_S = 2.0


def _device_run(job_dict, config_dict, sim, out_path):
    """One device's simulator, in a process of its own; its record goes to ``out_path``."""
    from trainingcxl.spec.config import Config
    from trainingcxl.host.apps.launch import launch
    from trainingcxl.host.jobs import TrainJob
    from trainingcxl.sim.runner import BenchFailure
    job = TrainJob.from_dict(job_dict)
    try:
        record = launch(job, Config.from_dict(config_dict), sim=sim, capture=True,
                        name=f"pool-device{job.pool_member['device']}")
        error = None
    except BenchFailure as e:
        record, error = e.record, str(e)
    Path(out_path).write_text(json.dumps({"record": record, "error": error}, default=str))


class _Exchange:
    """The coordinator's side of the exchanges: every device's message of one round in,
    the same answer to each out, and at most ``workers`` devices let run at once."""

    def __init__(self, conns, shard_list, workers):
        self.conns, self.shards, self.free = conns, shard_list, workers
        self.pending = {}               # device -> its message of the round
        self.ready = []                 # (device, answer): may run when a worker is free
        self.done = {}                  # device -> summary it sent last

    def receive(self, device, message):
        what = message[0]
        if what != "hello":
            self.free += 1              # a device that sends waits: its worker is free
        if what == "hello":
            self.ready.append((device, None))
        elif what == "done":
            self.done[device] = message[1]
        else:
            self.pending[device] = message
            live = [d for d in self.conns if d not in self.done]
            if len(self.pending) == len(live):
                self._answer_round()
        self._dispatch()

    def _answer_round(self):
        kinds = {m[:2] if m[0] == "gather" else m[:1] for m in self.pending.values()}
        if len(kinds) != 1:
            raise RuntimeError(f"the devices disagree on the exchange: {sorted(map(str, kinds))}")
        first = next(iter(self.pending.values()))
        if first[0] == "gather":
            answer = self._gathered({d: m[2] for d, m in self.pending.items()})
        else:
            answer = (max(m[1] for m in self.pending.values()),
                      sum(m[2] for m in self.pending.values()))
        self.ready.extend((d, answer) for d in sorted(self.pending))
        self.pending = {}

    def _gathered(self, parts):
        one = next(iter(parts.values()))
        n_tables = sum(len(s.tables) for s in self.shards)
        out = np.empty((one.shape[0], n_tables, one.shape[2]), dtype=one.dtype)
        for d, part in parts.items():
            out[:, list(self.shards[d].tables), :] = part
        return out

    def _dispatch(self):
        while self.free and self.ready:
            device, answer = self.ready.pop(0)
            self.free -= 1
            self.conns[device].send(answer)


def run_pool(job, config, *, sim="verilator", workers=None, log=print):
    """Train ``job`` on ``config``'s pool of devices; returns the merged record (and each
    device's under ``devices``). ``workers``: simulators running at once (default: as
    many as this machine has cores, at most the devices)."""
    plan = shards(config)
    n = len(plan)
    workers = max(1, min(n, workers or os.cpu_count() or 1))
    authkey = secrets.token_bytes(16)
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="trainingcxl-pool-") as tmp:
        listener = Listener(os.path.join(tmp, "pool.sock"), family="AF_UNIX", authkey=authkey)
        procs = []
        for s in plan:
            member = {"device": s.device, "tables": list(s.tables),
                      "model_rows": list(config.tables), "address": listener.address,
                      "authkey": authkey.hex(), "model_config": config.to_dict()}
            p = ctx.Process(target=_device_run, daemon=False,
                            args=(job.replace(pool_member=member).to_dict(),
                                  s.config.to_dict(), sim, os.path.join(tmp, f"d{s.device}.json")))
            p.start()
            procs.append(p)
        t0 = time.monotonic()
        stopped = None
        try:
            conns = _accept(listener, procs, n)
            _serve(_Exchange(conns, plan, workers), conns, procs)
        except RuntimeError as e:
            stopped = str(e)
        finally:
            listener.close()
            for p in procs:
                p.join(timeout=60 if stopped is None else 10)
                if p.is_alive():
                    p.kill()
                    p.join()
        results = [json.loads(Path(tmp, f"d{s.device}.json").read_text())
                   if Path(tmp, f"d{s.device}.json").exists() else {"record": None,
                                                                    "error": "no record"}
                   for s in plan]
    # The device that failed first says why; the others were stopped by the pool.
    errors = [f"device {d}: {r['error'][-1500:]}" for d, r in enumerate(results)
              if r["error"] and "the pool stopped" not in r["error"]]
    if stopped or errors or any(r["record"] is None for r in results):
        raise RuntimeError("; ".join(errors or [stopped or "a device left no record"]))
    record = merge_records([r["record"] for r in results], plan)
    record["pool"] = {"devices": n, "workers": workers,
                      "switch_latency": config.pool.switch_latency if n > 1 else 0,
                      "tables": [list(s.tables) for s in plan],
                      "wall_s": time.monotonic() - t0}
    return record


def _accept(listener, procs, n):
    """Every device's connection, by device number; a simulator that dies first stops it."""
    import queue
    import threading
    joined = queue.Queue()

    def accept():
        try:
            for _ in range(n):
                joined.put(listener.accept())
        except OSError:             # the listener closed: a simulator died first
            pass

    threading.Thread(target=accept, daemon=True).start()
    conns = {}
    while len(conns) < n:
        try:
            conn = joined.get(timeout=POLL_S)
        except queue.Empty:         # are the simulators still there?
            dead = [i for i, p in enumerate(procs) if p.exitcode is not None]
            if dead:
                raise RuntimeError(f"device {dead[0]}'s simulator ended before it joined "
                                   f"the pool")
            continue
        kind, device = conn.recv()
        if kind != "hello":
            raise RuntimeError(f"device {device} began with {kind!r}")
        conns[device] = conn
    return conns


def _serve(exchange, conns, procs):
    """Answer the devices until every one has said it is done."""
    for d in sorted(conns):
        exchange.receive(d, ("hello", d))
    by_conn = {c: d for d, c in conns.items()}
    while len(exchange.done) < len(conns):
        live = [c for c, d in by_conn.items() if d not in exchange.done]
        ready = wait(live, timeout=POLL_S)
        if not ready:
            dead = [i for i, p in enumerate(procs) if p.exitcode is not None
                    and i not in exchange.done]
            if dead:
                for c in live:                  # the others wait for an answer: stop them
                    try:
                        c.send(("abort", f"device {dead[0]} stopped"))
                    except OSError:
                        pass
                raise RuntimeError(f"device {dead[0]}'s simulator stopped in the middle of "
                                   f"the run")
            continue
        for c in ready:
            try:
                message = c.recv()
            except EOFError:
                raise RuntimeError(f"device {by_conn[c]} closed its link before it was done")
            exchange.receive(by_conn[c], message)


def merge_records(records, plan):
    """The pool's record from its devices' (in device order)."""
    first = records[0]
    rec = dict(first)
    batches = len(first["cycles_per_batch"])
    rec["cycles_per_batch"] = [max(r["cycles_per_batch"][i] for r in records)
                               for i in range(batches)]
    rec["cycles"] = max(r["cycles"] for r in records)
    for key in ("pooled_mismatches", "fallbacks"):
        rec[key] = sum(r.get(key, 0) for r in records)
    rec["counters"] = {k: sum(r["counters"].get(k, 0) for r in records)
                       for k in first["counters"]}
    rec["checks"] = [{"batch": c["batch"],
                      "tables_match": all(r["checks"][i]["tables_match"] for r in records)}
                     for i, c in enumerate(first["checks"])]
    rec["errors"] = [dict(e, device=d) for d, r in enumerate(records) for e in r["errors"]]
    for key in ("golden_match", "consistent"):
        rec[key] = all(r.get(key, False) for r in records)
    same = all(r["loss"] == first["loss"] for r in records)
    if not same:
        rec["golden_match"] = False
        rec["errors"].append({"loss": "the devices' GPUs disagree on the losses"})
    rec["devices"] = [{"device": s.device, "tables": list(s.tables), **r}
                      for s, r in zip(plan, records)]
    return rec

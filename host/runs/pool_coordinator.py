"""A training run on a pool of devices: one simulator per device, coupled batch by batch.

:func:`run_pool` starts a simulator per device of ``Config.pool`` (a process of this
machine, or a Ray task; :mod:`trainingcxl.spec.pool`), each training its tables with
the protocol of one
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

import dataclasses
import json
import multiprocessing
import os
import secrets
import tempfile
import time
from multiprocessing.connection import Listener, wait
from pathlib import Path

from trainingcxl.spec.pool import shards
from trainingcxl.host.runs.runners import DeviceRunner, Runner
from trainingcxl.host.runs.task import Result, Task
from trainingcxl.host.model.shard import model_inputs
from trainingcxl.host.protocol.pool import device_failures, recovery_point
from trainingcxl.host.protocol.run_record import (Check, CprFailure, Failure, PoolInfo, RunError,
                                                TrainRecord)

__all__ = ["run_pool", "merge_records", "PoolRunner"]

#: Seconds between checks that every simulator process still lives.
POLL_S = 2.0


def _device_run(task):
    """One device's simulator (``task``: its job, configuration and simulator); returns
    ``{"record", "error"}``, the record as JSON data (it crosses processes as JSON)."""
    _, record, error = DeviceRunner()(task)
    return {"record": None if record is None else record.to_dict(), "error": error}


def _device_process(task, out_path):
    Path(out_path).write_text(json.dumps(_device_run(task), default=str))


class _LocalDevices:
    """Each device's simulator in a process of this machine; the coordinator listens on
    a Unix socket."""

    def __init__(self, tmp):
        self.tmp, self.procs = tmp, []
        self.address, self.family = os.path.join(tmp, "pool.sock"), "AF_UNIX"

    def start(self, tasks):
        ctx = multiprocessing.get_context("spawn")
        for d, task in enumerate(tasks):
            p = ctx.Process(target=_device_process, args=(task, os.path.join(self.tmp, f"d{d}.json")))
            p.start()
            self.procs.append(p)

    def ended(self):
        return [d for d, p in enumerate(self.procs) if p.exitcode is not None]

    def results(self, stopped):
        for p in self.procs:
            p.join(timeout=60 if not stopped else 10)
            if p.is_alive():
                p.kill()
                p.join()
        paths = [Path(self.tmp, f"d{d}.json") for d in range(len(self.procs))]
        return [json.loads(p.read_text()) if p.exists() else {"record": None, "error": "no record"}
                for p in paths]


class _RayDevices:
    """Each device's simulator as a Ray task (on whichever node Ray places it); the
    coordinator listens on TCP. The tasks of a pool must all run at once (they meet
    every batch), so each asks for a share of a CPU when the cluster has fewer CPUs
    than the pool has devices."""

    def __init__(self, cluster, n):
        import ray
        self.ray = ray
        self.address = (ray.util.get_node_ip_address(), 0)
        self.family = "AF_INET"
        cpus = max(1, cluster.workers)
        self.task = ray.remote(num_cpus=min(1.0, cpus / n), max_retries=0)(_device_run)
        self.refs = []

    def start(self, tasks):
        self.refs = [self.task.remote(task) for task in tasks]

    def ended(self):
        done, _ = self.ray.wait(self.refs, num_returns=len(self.refs), timeout=0)
        return [self.refs.index(r) for r in done]

    def results(self, stopped):
        out = []
        for ref in self.refs:
            try:
                out.append(self.ray.get(ref, timeout=60 if not stopped else 10))
            except Exception as e:      # a lost task, a task stopped by the pool
                self.ray.cancel(ref, force=True)
                out.append({"record": None, "error": f"{type(e).__name__}: {e}"})
        return out


class _Exchange:
    """The coordinator's side of the exchanges: every device's message of one round in,
    the same answer to each out, and at most ``workers`` devices let run at once.

    A failure of the pool opens a recovery (:attr:`recovery`) with the first device's
    ``probe``: an exchange that waits is answered ``failed`` (its devices stop when the
    failure reaches their cycle, and probe too), the pool's recovery point is chosen
    once every device has probed, and a device that fails again and probes anew is
    given the same one; the recovery ends when every device has said ``resumed``."""

    def __init__(self, conns, shard_list, workers, on_batch=lambda b, durable: None):
        self.conns, self.shards, self.free = conns, shard_list, workers
        self.on_batch = on_batch        # told of each batch the whole pool has looked up
        self.pending = {}               # device -> its message of the round
        self.ready = []                 # (device, answer): may run when a worker is free
        self.done = {}                  # device -> summary it sent last
        self.recovery = None            # the pool's recovery under way
        self.recoveries = []            # the recovery points chosen, in order

    def _live(self):
        return [d for d in self.conns if d not in self.done]

    def receive(self, device, message):
        what = message[0]
        if what == "hello":             # a device that has not run yet: it waits its turn
            self.ready.append((device, None))
        else:
            self.free += 1              # a device that sends waits: its worker is free
            if what == "done":
                if self.recovery is not None:
                    raise RuntimeError(f"device {device} ended its run during a recovery "
                                       f"of the pool")
                self.done[device] = message[1]
            elif what in ("probe", "recovered", "resumed"):
                self._recover(device, message)
            elif self.recovery is not None:
                self.ready.append((device, ("failed",)))
            else:
                self.pending[device] = message
                if len(self.pending) == len(self._live()):
                    self._answer_round()
        self._dispatch()

    def _recover(self, device, message):
        """One message of the pool's recovery: ``probe`` (its checkpoint records),
        ``recovered`` (rolled back; the snapshot's parameters from its holder), and
        ``resumed`` (ready to train on). Each round is answered once every device is in
        it; a device that fails again starts over and is answered at once in the rounds
        the others have passed."""
        if self.recovery is None:
            # The first device to probe: the exchange the others wait in will not happen.
            self.recovery = {"probes": {}, "point": None, "recovered": {}, "params": None,
                             "resumed": {}}
            self.ready.extend((d, ("failed",)) for d in sorted(self.pending))
            self.pending = {}
        state = self.recovery
        what, live = message[0], len(self._live())
        if what == "probe":
            state["recovered"].pop(device, None)
            state["resumed"].pop(device, None)
            if state["point"] is not None:        # failed again during the recovery
                if message[1].committed is None or message[1].committed < state["point"]["d"]:
                    raise RuntimeError(f"device {device} lost batches the pool chose to "
                                       f"recover to: {message[1]}")
                self.ready.append((device, state["point"]))
                return
            state["probes"][device] = message[1:]
            if len(state["probes"]) == live:
                state["point"] = recovery_point(state["probes"])
                self.recoveries.append(state["point"])
                self.ready.extend((d, state["point"]) for d in sorted(state["probes"]))
        elif what == "recovered":
            state["recovered"][device] = message[1:]
            if state["params"] is not None:
                self.ready.append((device, (state["params"], message[2])))
            elif len(state["recovered"]) == live:
                state["params"] = state["recovered"][state["point"]["holder"]][0]
                t = max(r[1] for r in state["recovered"].values())
                self.ready.extend((d, (state["params"], t)) for d in sorted(state["recovered"]))
        else:                                   # "resumed"
            state["resumed"][device] = message[1]
            if len(state["resumed"]) == live:
                t = max(state["resumed"].values())
                self.ready.extend((d, t) for d in sorted(state["resumed"]))
                self.recovery = None

    def _answer_round(self):
        kinds = {m[0] for m in self.pending.values()}
        if len(kinds) != 1:
            raise RuntimeError(f"the devices disagree on the exchange: {sorted(kinds)}")
        messages = self.pending
        if kinds == {"align"}:
            answer = max(m[1] for m in messages.values())
        else:                           # "batch": parts, t, owed
            parts = [self._gathered({d: m[1][k] for d, m in messages.items()})
                     for k in range(len(next(iter(messages.values()))[1]))]
            answer = (parts, (max(m[2] for m in messages.values()),
                              sum(m[3] for m in messages.values())),
                      min(m[4] for m in messages.values()))
            self.on_batch(max(m[5] for m in messages.values()), answer[2])
        self.ready.extend((d, answer) for d in sorted(messages))
        self.pending = {}

    def _gathered(self, parts):
        return model_inputs([self.shards[d].tables for d in sorted(parts)],
                            [parts[d] for d in sorted(parts)])

    def _dispatch(self):
        while self.free and self.ready:
            device, answer = self.ready.pop(0)
            self.free -= 1
            self.conns[device].send(answer)


def run_pool(job, config, *, sim="verilator", workers=None, cluster=None, log=None):
    """Train ``job`` on ``config``'s pool of devices; returns the merged record (and each
    device's under ``devices``). ``workers``: simulators running at once (default: as
    many as this machine has cores, at most the devices). ``cluster``: a Ray
    :class:`~.cluster.RayCluster` to run the simulators on, or ``None`` for processes of
    this machine. ``log``: told a line of progress as each batch reaches the pool's GPU
    step (every ``job.log_every``-th and the last, as one device's run prints them)."""
    plan = shards(config)
    n = len(plan)
    if cluster is None and log is not None:
        # Each distinct device is built here first, its progress on the command's
        # terminal (minutes, once per configuration); the simulators then find it built.
        from trainingcxl.sim.runner import build
        for cfg in {s.config.hardware_digest(): s.config for s in plan}.values():
            build(sim, cfg, log=log)
    workers = max(1, min(n, workers or (cluster.workers if cluster is not None and
                                         cluster.name != "local" else os.cpu_count()) or 1))
    authkey = secrets.token_bytes(16)
    with tempfile.TemporaryDirectory(prefix="trainingcxl-pool-") as tmp:
        devices = (_RayDevices(cluster, n) if cluster is not None and cluster.name != "local"
                   else _LocalDevices(tmp))
        listener = Listener(devices.address, family=devices.family, authkey=authkey)
        address = listener.address
        if devices.family == "AF_INET":         # where the tasks reach this process
            address = (devices.address[0], listener.address[1])
        devices.start([Task(f"pool-device{s.device}", s.config, job.replace(
            failures=tuple(device_failures(job.failures, s.device)), pool_member={
                "device": s.device, "tables": list(s.tables),
                "ranges": [list(r) for r in s.ranges], "model_rows": list(config.tables),
                "address": address, "authkey": authkey.hex(), "model_config": config.to_dict()}),
            sim=sim) for s in plan])
        t0 = time.monotonic()
        stopped = None
        exchange = None
        try:
            conns = _accept(listener, devices, n)
            exchange = _Exchange(conns, plan, workers, _progress(job, log, t0))
            _serve(exchange, conns, devices)
        except RuntimeError as e:
            stopped = str(e)
        finally:
            listener.close()
        results = devices.results(stopped)
    # The device that failed first says why; the others were stopped by the pool.
    errors = [f"device {d}: {r['error'][-1500:]}" for d, r in enumerate(results)
              if r["error"] and "the pool stopped" not in r["error"]]
    if stopped or errors or any(r["record"] is None for r in results):
        raise RuntimeError("; ".join(errors or [stopped or "a device left no record"]))
    record = merge_records([TrainRecord.from_dict(r["record"]) for r in results], plan)
    record.pool = PoolInfo(devices=n, workers=workers,
                           where="local" if cluster is None else cluster.name,
                           switch_latency=config.pool.switch_latency if n > 1 else 0,
                           tables=[list(s.tables) for s in plan],
                           pieces=[s.label(config.tables) for s in plan],
                           recoveries=exchange.recoveries, wall_s=time.monotonic() - t0)
    return record


def _progress(job, log, t0):
    """The pool's progress line of a batch, as :func:`run_pool` tells ``log``."""
    def on_batch(b, durable):
        if log is not None and not job.quiet and (b % job.log_every == 0 or b == job.batches):
            log(f"  batch {b}/{job.batches}: looked up on every device, pool durable to batch "
                f"{durable}; {time.monotonic() - t0:.0f} s")
    return on_batch


def _accept(listener, devices, n):
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
            dead = devices.ended()
            if dead:
                raise RuntimeError(f"device {dead[0]}'s simulator ended before it joined "
                                   f"the pool")
            continue
        kind, device = conn.recv()
        if kind != "hello":
            raise RuntimeError(f"device {device} began with {kind!r}")
        conns[device] = conn
    return conns


def _serve(exchange, conns, devices):
    """Answer the devices until every one has said it is done."""
    for d in sorted(conns):
        exchange.receive(d, ("hello", d))
    by_conn = {c: d for d, c in conns.items()}
    while len(exchange.done) < len(conns):
        live = [c for c, d in by_conn.items() if d not in exchange.done]
        ready = wait(live, timeout=POLL_S)
        if not ready:
            dead = [d for d in devices.ended() if d not in exchange.done]
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
    """The pool's record (a :class:`~trainingcxl.host.protocol.run_record.TrainRecord`) from
    its devices' (in device order)."""
    first = records[0]
    rec = first.replace()
    # The slowest device's cycles of each batch (every device trained the same batches).
    rec.cycles_per_batch = {b: max(r.cycles_per_batch[b] for r in records)
                            for b in first.cycles_per_batch}
    rec.cycles = max(r.cycles for r in records)
    rec.pooled_mismatches = sum(r.pooled_mismatches for r in records)
    rec.fallbacks = sum(r.fallbacks for r in records)
    rec.counters = {k: sum(r.counters.get(k, 0) for r in records) for k in first.counters}
    # A failure may cut one device's check of a batch and not another's: the pool's check
    # of a batch holds if every check any device made of it did.
    checked = {}
    for r in records:
        for c in r.checks:
            checked[c.batch] = checked.get(c.batch, True) and c.tables_match
    rec.checks = [Check(batch=b, tables_match=ok) for b, ok in sorted(checked.items())]
    rec.errors = [e.replace(device=d) for d, r in enumerate(records) for e in r.errors]
    rec.golden_match = all(bool(r.golden_match) for r in records)
    rec.consistent = all(bool(r.consistent) for r in records)
    if not all(r.loss == first.loss for r in records):
        rec.golden_match = False
        rec.errors.append(RunError(loss="the devices' GPUs disagree on the losses"))
    rec.failures = [_pool_failure(fs) for fs in zip(*(r.failures for r in records))]
    if len({len(r.failures) for r in records}) > 1:
        rec.consistent = rec.golden_match = False
        rec.errors.append(RunError(failures="the devices saw different numbers of failures"))
    if first.cpr_failures is not None:
        rec.cpr_failures = [_cpr_failure(fs) for fs in zip(*(r.cpr_failures for r in records))]
        rec.consistent = rec.consistent and all(f.consistent for f in rec.cpr_failures)
        # The devices read and write their rows in parallel: the slowest one's cycles.
        stats = [r.cpr for r in records]
        rec.cpr = first.cpr.replace(**{
            f.name: (max if f.name.endswith("cycles") else sum)(getattr(c, f.name) for c in stats)
            for f in dataclasses.fields(first.cpr)
            if f.name not in ("interval", "every", "checkpoints")})
    rec.devices = [r.replace(device=s.device, tables=list(s.tables),
                             ranges=[list(x) for x in s.ranges])
                   for s, r in zip(plan, records)]
    return rec


def _cpr_failure(per_device):
    """One failure of a pool under CPR from every device's record of it: the failed
    device's reload, and how long the pool stood still."""
    mine = per_device[per_device[0].device]
    return CprFailure(batch=mine.batch, device=mine.device,
                      batches_since_checkpoint=mine.batches_since_checkpoint,
                      reload_cycles=mine.reload_cycles, lines_written=mine.lines_written,
                      consistent=mine.consistent,
                      pool_recovery_cycles=max(f.pool_recovery_cycles for f in per_device))


def _pool_failure(per_device):
    """One failure of the pool from every device's record of it: the devices whose power
    failed, the recovery point they all reached, and each device's recovery."""
    first = per_device[0]
    same = {(f.recovered_batch, f.recovered_mlp_batch) for f in per_device}
    invariants = {k: all(f.invariants[k] for f in per_device) for k in first.invariants}
    invariants["same_point_on_every_device"] = len(same) == 1
    return Failure(
        cycle=first.cycle, phase=first.phase, batch=first.batch,
        recovered_batch=first.recovered_batch, recovered_mlp_batch=first.recovered_mlp_batch,
        pool_durable_before=first.pool_durable_before, snapshot_from=first.snapshot_from,
        devices_failed=[d for d, f in enumerate(per_device) if f.power_failed],
        durable_before=first.pool_durable_before,
        recovery_cycles=max(f.recovery_cycles for f in per_device),
        recovery_cycles_per_device=[f.recovery_cycles for f in per_device],
        recovery_lines=max(f.recovery_lines or 0 for f in per_device),
        pool_recovery_cycles=max(f.pool_recovery_cycles for f in per_device),
        rolled_back=sum(f.rolled_back for f in per_device),
        rolled_back_per_device=[f.rolled_back for f in per_device],
        failures_during_recovery=sum(f.failures_during_recovery for f in per_device),
        recovery_failure_cycles=sorted({c for f in per_device for c in f.recovery_failure_cycles}),
        invariants=invariants, consistent=all(invariants.values()))


class PoolRunner(Runner):
    """A training job on the configuration's pool of devices, their simulators on
    ``task.workers`` processes at once; a failed device's error is the result's.
    ``where``: the cluster the simulators run on (``--cluster``: local processes, or
    Ray); ``live``: the command's own run, its job's progress lines as it asks."""

    def __init__(self, record_class=None, live=False, where="local"):
        self.record_class, self.live, self.where = record_class, live, where

    def __call__(self, task):
        from .cluster import open_cluster
        job = task.job if self.live else task.job.replace(quiet=True)
        try:
            log = (lambda text: print(text, flush=True)) if self.live else None
            if self.where == "local":
                record = run_pool(job, task.config, sim=task.sim, workers=task.workers, log=log)
            else:
                with open_cluster(self.where) as cluster:
                    record = run_pool(job, task.config, sim=task.sim, workers=task.workers,
                                      cluster=cluster, log=log)
            return Result(task, record)
        except RuntimeError as e:
            return Result(task, None, str(e))

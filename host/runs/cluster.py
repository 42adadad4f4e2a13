"""Where fanned-out work runs: a process pool on this machine or a Ray cluster.

``campaign``, ``sweep``, ``fuzz`` and ``bench`` split their work into tasks
(training runs, chunks of crash points, shards of fuzz cases) that are
independent and deterministic: a task gives the same record wherever and
however often it runs. A :class:`Cluster` runs them and hands back each result
as it finishes, so the commands keep one progress bar and one tally whatever
runs them:

* ``local``: a pool of ``--jobs`` processes on this machine (the default);
* ``ray``: a private Ray instance started on this machine with ``--jobs`` CPUs
  (what a cluster would do, on one machine: to measure Ray's own cost);
* ``auto``: the Ray cluster this machine joined with ``ray start``;
* ``ray://HOST:PORT``: a remote Ray cluster, through Ray Client.

Every node must have the project installed with the ``cluster`` extra
(``pip install -e '.[cluster]'``) and the simulators (``./run.sh`` does both).
A node converts and compiles each device once, before the tasks, into its own
cache (:func:`trainingcxl.sim.runner.build` locks it, so tasks sharing a node
share the build). A task whose worker or node is lost is run again, up to
:data:`TASK_RETRIES` times; only then is it reported as failed.
"""

import argparse
import os
import sys
from abc import ABC, abstractmethod
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

__all__ = ["CLUSTERS", "TASK_RETRIES", "TaskLost", "Cluster", "LocalPool", "RayCluster",
           "open_cluster", "parse_cluster"]

#: The ``--cluster`` values besides ``ray://HOST:PORT``.
CLUSTERS = ("local", "ray", "auto")
#: How often a task whose worker died is run again before it counts as failed.
TASK_RETRIES = 3


class TaskLost(RuntimeError):
    """A task's worker (or node) died more often than :data:`TASK_RETRIES` allows."""


def _build(sim, config_dict):
    """Convert and compile one device into this node's cache (a no-op when cached)."""
    from trainingcxl.spec.config import Config
    from trainingcxl.sim.runner import build
    build(sim, Config.from_dict(config_dict), log=lambda text: print(text, file=sys.stderr, flush=True))


def _distinct(configs):
    return list({cfg.hardware_digest(): cfg for cfg in configs}.values())


class Cluster(ABC):
    """Runs independent tasks somewhere and yields their results as they finish
    (:class:`LocalPool`, :class:`RayCluster`)."""

    #: What ``--cluster`` said, for the JSON's ``execution`` record.
    name = "?"

    @property
    @abstractmethod
    def workers(self):
        """Tasks that can run at once."""

    @abstractmethod
    def prebuild(self, configs, sim="verilator"):
        """Build each distinct device (by hardware digest) once on every node."""

    @abstractmethod
    def run(self, fn, items):
        """Run ``fn(item)`` for every item; yields ``(index, result)`` as each finishes,
        ``result`` being a :class:`TaskLost` when the task could not be run. ``fn``
        must be a module-level function (it is sent to the workers by name)."""

    def close(self):
        """Let the workers go."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LocalPool(Cluster):
    """A pool of processes on this machine; a pool broken by a dead worker is replaced
    and the tasks it had not finished are run again."""

    name = "local"

    def __init__(self, jobs=None):
        self._workers = jobs or os.cpu_count() or 1

    @property
    def workers(self):
        return self._workers

    def prebuild(self, configs, sim="verilator"):
        distinct = _distinct(configs)
        if self._workers <= 1 or len(distinct) <= 1:
            for cfg in distinct:
                _build(sim, cfg.to_dict())
            return
        with ProcessPoolExecutor(max_workers=min(self._workers, len(distinct))) as pool:
            for fut in [pool.submit(_build, sim, cfg.to_dict()) for cfg in distinct]:
                fut.result()

    def run(self, fn, items):
        left = dict(enumerate(items))
        attempts = dict.fromkeys(left, 0)
        while left:
            pool = ProcessPoolExecutor(max_workers=self._workers)
            try:
                pending = {pool.submit(fn, item): i for i, item in left.items()}
                # A broken pool fails every task it holds, queued ones too: only those
                # a worker could have started count an attempt.
                for i in list(left)[:self._workers]:
                    attempts[i] += 1
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        i = pending.pop(fut)
                        try:
                            result = fut.result()
                        except BrokenProcessPool:
                            continue            # run again in a fresh pool, below
                        del left[i]
                        yield i, result
                    if any(isinstance(f.exception(), BrokenProcessPool) for f in done):
                        break
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
            for i in [i for i in left if attempts[i] > TASK_RETRIES]:
                del left[i]
                yield i, TaskLost(f"its worker died {attempts[i]} times")


def _build_on_node(sim, config_dict):
    """:func:`_build` as a Ray task: returns the node it built on."""
    import ray
    _build(sim, config_dict)
    return ray.get_runtime_context().get_node_id()


def trainingcxl_task(fn, item):
    """The Ray task around every ``fn``: a worker running one is titled
    ``ray::trainingcxl_task`` (what `ps` shows)."""
    return fn(item)


def _client_token():
    """Ray Client sends the cluster's token only when token authentication is on in this
    process; ``ray start`` turns it on where a token exists (``ray get-auth-token``), as
    Ray's own ``ray.init()`` does, but a client connection does not: turn it on here the
    same way (a cluster without tokens needs none: nothing changes)."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available)
    except ImportError:             # a Ray without token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


class RayCluster(Cluster):
    """Tasks on a Ray cluster: one CPU each, run again when their worker dies.

    ``address``: ``None`` starts a private instance on this machine with ``jobs``
    CPUs, ``"auto"`` joins the cluster this machine is part of, ``ray://...``
    connects through Ray Client. A Ray already initialised in this process (a
    test's) is used as it is."""

    def __init__(self, address=None, jobs=None):
        try:
            import ray
        except ImportError:
            raise SystemExit("error: --cluster ray needs Ray: pip install -e '.[cluster]' "
                             "(./run.sh installs it)") from None
        self.ray = ray
        self.name = address or "ray"
        self._owned = not ray.is_initialized()
        if self._owned:
            options = {"include_dashboard": False, "log_to_driver": False,
                       "configure_logging": False}
            if address is None:
                options["num_cpus"] = jobs or os.cpu_count() or 1
            # Workers inherit this process's environment (simulator paths, cache).
            os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
            if address and address.startswith("ray://"):
                _client_token()
            try:
                # No address: a Ray instance of this run's own ("local"), even when
                # another one (say, a run killed earlier) is still up on the machine.
                ray.init(address=address or "local", **options)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise SystemExit(f"error: cannot reach the Ray cluster {address!r}: {e}") from None
        self._task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES, retry_exceptions=False)(trainingcxl_task)
        self._build = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(_build_on_node)

    @property
    def workers(self):
        return int(self.ray.cluster_resources().get("CPU", 1))

    def _nodes(self):
        return [n["NodeID"] for n in self.ray.nodes() if n["Alive"] and n["Resources"].get("CPU")]

    def prebuild(self, configs, sim="verilator"):
        """Build every distinct device on every node, pinned there; returns the
        ``(node id, hardware digest)`` of each build."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        builds = [(node, cfg) for node in self._nodes() for cfg in _distinct(configs)]
        refs = [self._build.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                .remote(sim, cfg.to_dict()) for node, cfg in builds]
        return list(zip(self.ray.get(refs), [cfg.hardware_digest() for _, cfg in builds]))

    def run(self, fn, items):
        ray = self.ray
        pending = {self._task.remote(fn, item): i for i, item in enumerate(items)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                try:
                    yield i, ray.get(ref)
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                        ray.exceptions.ObjectLostError) as e:
                    yield i, TaskLost(f"{type(e).__name__} after {TASK_RETRIES} retries")

    def close(self):
        if self._owned:
            self.ray.shutdown()


def parse_cluster(text):
    """argparse type for ``--cluster``."""
    if text in CLUSTERS or text.startswith("ray://"):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: expected {', '.join(CLUSTERS)} or ray://HOST:PORT")


def open_cluster(where="local", jobs=None):
    """The :class:`Cluster` a ``--cluster`` value names."""
    if where == "local":
        return LocalPool(jobs)
    return RayCluster(None if where == "ray" else where, jobs)

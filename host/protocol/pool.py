"""A device's end of a pool: the exchanges that couple its simulator to the others'.

Each device of a pool runs in a simulator of its own, with the training protocol
(:class:`~.training.TrainingRun`) for its tables. The devices meet only where the
GPU needs all of them, once a batch: the GPU step runs on the pooled vectors of
every table, and it begins when the last device's lookup has delivered. So the
coupling is per batch, not per register access:

* ``exchange(parts, t, owed)``, once a batch, before any model steps: this device's
  pooled vectors (batch, its tables, dim) of the golden model, the float32
  reference and the device, for the model's (batch, all tables, dim); and when
  this device could start the GPU step with the GPU kernels it owes (the pooling
  of rows the GPU holds), for the pool's: the latest start and the sum of the
  kernels. Every device then lets the same GPU step pass, so their clocks agree
  wherever they meet, whatever runs them and in which order;
* ``align(t)`` at power-up: every device begins batch 1 at the same cycle.

A failure of the pool (every device's power, one device's, one during another's
recovery) is planned at the same cycle on every device: a device whose power fails
loses it, the others only stop (``halt``), and all recover together, exactly
(docs/pool.md, "Exact recovery"):

* ``probe(records, durable, t)``: this device's checkpoint records as the media hold
  them (:class:`~trainingcxl.host.model.recovery.Checkpoint`); once every device's
  are in, the pool's durable batch D and the snapshot m that every device rolls back
  to (:func:`recovery_point`). A device that fails again during the recovery probes
  again and gets the same answer at once;
* ``recovered(params, t)``: after its ``RECOVER`` to D, the snapshot's MLP
  parameters from the device that holds it (``None`` from the others); returns them,
  and when every device has recovered;
* ``resumed(t)``: a device with no snapshot of its own within K of D has taken one of
  the MLP it resumes with (as batch D's); every device resumes at the same cycle.
"""

__all__ = ["PoolLink", "PoolFailed", "recovery_point", "device_failures"]

#: How a pool's failure is planned (:class:`~.timed.FailurePlan` entries that strike
#: every device at the same cycle).
POOL_FAILURE_KEYS = ("pool_batch", "after")


def device_failures(entries, device):
    """Device ``device``'s :class:`~.timed.FailurePlan` from the pool's ``entries``: each
    ``{"pool_batch": b, "offset": k}`` or ``{"after": k}``, with ``"devices"``, the
    devices whose power fails (a list, or ``"all"``, the default); the others halt at
    the same cycle. A :exc:`ValueError` names an entry of another kind."""
    out = []
    for e in entries:
        if not any(k in e for k in POOL_FAILURE_KEYS):
            raise ValueError(f"a pool's failure is planned at a batch's GPU step "
                             f"(pool_batch, offset) or after the failure before it (after), "
                             f"not {e}")
        devices = e.get("devices", "all")
        failed = devices == "all" or device in devices
        out.append({**{k: v for k, v in e.items() if k != "devices"},
                    **({} if failed else {"halt": True})})
    return out


class PoolFailed(Exception):
    """Another device's failure ended the exchange: this device is stopped too when the
    pool's failure reaches its cycle."""


def recovery_point(probes):
    """The pool's recovery from every device's checkpoint records ``probes``
    (``{device: (Checkpoint, durable, t)}``, ``durable`` the newest batch the host saw
    durable on the device before the failure): ``{"d", "m", "holder", "durable_before",
    "t"}``.

    D is the newest batch committed on every device, and no more than K after the newest
    snapshot m that some device holds and that is not after every device's commit: the
    tables of every device can be rolled back to D (each keeps the undo records of
    every batch the pool has not passed: ``POOL_DURABLE``), and the MLP of m is on
    ``holder`` (the lowest device holding it)."""
    records = {d: p[0] for d, p in probes.items()}
    missing = [d for d, r in records.items() if r.committed is None]
    if missing:
        raise RuntimeError(f"device {missing[0]} holds no commit record: the pool cannot "
                           f"recover")
    committed = min(r.committed for r in records.values())
    ks = {r.k for r in records.values()}
    if len(ks) != 1:
        raise RuntimeError(f"the devices' commit records disagree on K: {sorted(ks)}")
    snaps = [(b, d) for d, r in sorted(records.items()) for b in r.snapshots if b <= committed]
    if not snaps:
        raise RuntimeError(f"no device holds a snapshot of batch {committed} or older")
    m = max(b for b, _ in snaps)
    return {"d": min(committed, m + ks.pop()), "m": m,
            "holder": min(d for b, d in snaps if b == m),
            "durable_before": min(p[1] for p in probes.values()),
            "t": max(p[2] for p in probes.values())}


class PoolLink:
    """The exchange of device ``device`` of ``devices`` with the pool's coordinator at
    ``address``; the coordinator lets it run when it answers. ``tables``: the model's
    table of each piece the device holds, ``ranges`` the rows ``(first, end)`` of each
    (:class:`~trainingcxl.spec.pool.Shard`); ``model_rows``: the rows of every table of
    the model."""

    def __init__(self, address, authkey, device, tables, ranges, model_rows, devices):
        from multiprocessing.connection import Client
        self.device, self.devices, self.tables = device, devices, tuple(tables)
        self.ranges = tuple(map(tuple, ranges))
        self.model_rows = tuple(model_rows)
        # A TCP address (host, port) crosses JSON as a list.
        address = tuple(address) if isinstance(address, list) else address
        self.conn = Client(address, authkey=bytes.fromhex(authkey))
        self._ask("hello", device)

    def _ask(self, *message):
        self.conn.send(message)
        answer = self.conn.recv()
        word = answer[0] if isinstance(answer, tuple) and answer else None
        if isinstance(word, str) and word == "abort":
            raise RuntimeError(f"the pool stopped: {answer[1]}")
        if isinstance(word, str) and word == "failed":
            raise PoolFailed()
        return answer

    def exchange(self, parts, t, owed=0, durable=0, batch=0):
        """Once a batch (``batch``): this device's pooled vectors ``parts`` (each batch x
        its tables x dim), when it could start the GPU step, ``t``, with the GPU kernels it
        owes, and the newest batch the host has seen durable on it; returns every table's pooled
        vectors (each batch x model tables x dim), the pool's GPU start and kernels, and
        the newest batch durable on every device. Raises :class:`PoolFailed` if a
        failure of the pool comes first."""
        return self._ask("batch", parts, int(t), int(owed), int(durable), int(batch))

    def probe(self, records, durable, t):
        """After a failure: this device's checkpoint records, the newest batch the host
        had seen durable on it and the cycle it is at; returns :func:`recovery_point`."""
        return self._ask("probe", records, int(durable), int(t))

    def resumed(self, t):
        """Ready to train on (its snapshots are within K of D again); returns the cycle at
        which every device is."""
        return self._ask("resumed", int(t))

    def recovered(self, params, t):
        """Recovered to D: the snapshot's parameters if this device holds it (else
        ``None``) and its cycle; returns the parameters and the cycle at which every
        device has recovered."""
        return self._ask("recovered", params, int(t))

    def align(self, t):
        """The latest of the devices' ``t``: when all of them can begin."""
        return self._ask("align", int(t))

    def close(self, summary=None):
        try:
            self.conn.send(("done", summary))
        finally:
            self.conn.close()

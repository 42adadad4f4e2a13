"""A device's end of a pool: the exchanges that couple its simulator to the others'.

Each device of a pool runs in a simulator of its own, with the training protocol
(:class:`~.training.TrainingRun`) for its tables. The devices meet only where the
GPU needs all of them, once a batch: the GPU step runs on the pooled vectors of
every table, and it begins when the last device's lookup has delivered. So the
coupling is per batch, not per register access:

* ``gather(kind, pooled)``: this device's pooled vectors (batch, its tables, dim)
  for the others', the model's (batch, all tables, dim) back; the golden model,
  the float32 reference and the GPU each gather theirs;
* ``clock(t, owed)``: when this device could start the GPU step and the GPU kernels
  it owes (the pooling of rows the GPU holds); back, the pool's: the latest start
  and the sum of the kernels. Every device then lets the same GPU step pass, so
  their clocks agree wherever they meet, whatever runs them and in which order.

At power-up the clocks are aligned the same way (:meth:`PoolLink.align`): every
device begins batch 1 at the same cycle. The coordinator is
:mod:`trainingcxl.host.tools.device_pool`.
"""

__all__ = ["PoolLink"]


class PoolLink:
    """The exchange of device ``device`` with the pool's coordinator at ``address``; the
    coordinator lets it run when it answers. ``tables``: the numbers of the model's
    tables the device holds; ``model_rows``: the rows of every table of the model."""

    def __init__(self, address, authkey, device, tables, model_rows):
        from multiprocessing.connection import Client
        self.device, self.tables = device, tuple(tables)
        self.model_rows = tuple(model_rows)
        # A TCP address (host, port) crosses JSON as a list.
        address = tuple(address) if isinstance(address, list) else address
        self.conn = Client(address, authkey=bytes.fromhex(authkey))
        self._ask("hello", device)

    def _ask(self, *message):
        self.conn.send(message)
        answer = self.conn.recv()
        if isinstance(answer, tuple) and answer and answer[0] == "abort":
            raise RuntimeError(f"the pool stopped: {answer[1]}")
        return answer

    def gather(self, kind, pooled):
        return self._ask("gather", kind, pooled)

    def clock(self, t, owed=0):
        """The pool's GPU start and kernels owed, for this device's ``t`` and ``owed``."""
        return self._ask("clock", int(t), int(owed))

    def close(self, summary=None):
        try:
            self.conn.send(("done", summary))
        finally:
            self.conn.close()

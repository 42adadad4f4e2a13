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

The coordinator is :mod:`trainingcxl.host.tools.device_pool`.
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

    def exchange(self, parts, t, owed=0):
        """Once a batch: this device's pooled vectors ``parts`` (each batch x its tables x
        dim) and when it could start the GPU step, ``t``, with the GPU kernels it owes;
        returns every table's pooled vectors (each batch x model tables x dim) and the
        pool's GPU start and kernels."""
        return self._ask("batch", parts, int(t), int(owed))

    def align(self, t):
        """The latest of the devices' ``t``: when all of them can begin."""
        return self._ask("align", int(t))

    def close(self, summary=None):
        try:
            self.conn.send(("done", summary))
        finally:
            self.conn.close()

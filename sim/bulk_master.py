"""The bench's side of the bulk CXL.mem master (:mod:`.rtl.mem_bulk`): a list of line
reads or writes in one operation, the addresses and data moved through backdoor
RAMs as numpy arrays instead of a Python step per line."""

import numpy as np
from cocotb.triggers import First, RisingEdge, Timer

from trainingcxl.spec.config import LINE_BITS, LINE_BYTES
from .backdoor import ram_array
from .bench_env import PERIOD_NS
from .rtl.mem_bulk import BULK_LINES

__all__ = ["MemBulkDriver"]


class MemBulkDriver:
    """Runs bulk operations on a simulation top's ``bulk_*`` ports.

    :meth:`open` gives ``None`` where the top or its backdoor RAMs are missing
    (Icarus, a board top): the bench's own master then carries every line."""

    #: Fewer lines than this go through the bench's master (no RAM round trip).
    MIN_LINES = 8
    #: Cycles one operation may take per line before it counts as hung.
    TIMEOUT_CYCLES_PER_LINE = 4096

    def __init__(self, dut, addrs, data):
        self.dut, self.addrs, self.data = dut, addrs, data

    @classmethod
    def open(cls, dut):
        if not hasattr(dut, "bulk_start"):
            return None
        addrs = ram_array("bulk_addr", BULK_LINES, 64)
        data = ram_array("bulk_data", BULK_LINES, LINE_BITS)
        if addrs is None or data is None:
            return None
        return cls(dut, addrs, data)

    async def _run(self, addrs, *, write):
        """One operation of at most :data:`BULK_LINES` lines; returns the failed answers."""
        dut, n = self.dut, len(addrs)
        self.addrs[:n] = np.asarray(addrs, dtype="<u8").view(np.uint8).reshape(n, 8)
        before = int(dut.bulk_done.value)
        # Raise start just after an edge and drop it after the next, which samples it
        # (a write made at an edge's own time step may come before or after its sampling).
        await RisingEdge(dut.clk)
        dut.bulk_write.value = int(write)
        dut.bulk_count.value = n
        dut.bulk_start.value = 1
        try:
            await RisingEdge(dut.clk)
        finally:
            dut.bulk_start.value = 0        # also when a power failure cancels the wait
        limit = Timer(n * self.TIMEOUT_CYCLES_PER_LINE * PERIOD_NS, "ns")
        while int(dut.bulk_done.value) == before:
            if await First(dut.bulk_done.value_change, limit) is limit:
                raise TimeoutError(f"a bulk CXL.mem operation of {n} lines did not end")
        return int(dut.bulk_errors.value)

    async def read(self, addrs):
        """``(data words, failed answers)`` of the lines ``addrs``, in order."""
        words, errors = [], 0
        for k in range(0, len(addrs), BULK_LINES):
            part = addrs[k:k + BULK_LINES]
            errors += await self._run(part, write=False)
            raw = self.data[:len(part), :LINE_BYTES].tobytes()
            words += [int.from_bytes(raw[i:i + LINE_BYTES], "little")
                      for i in range(0, len(raw), LINE_BYTES)]
        return words, errors

    async def write(self, lines):
        """Write ``{addr: data}``; returns the failed answers."""
        items, errors = list(lines.items()), 0
        for k in range(0, len(items), BULK_LINES):
            part = items[k:k + BULK_LINES]
            raw = b"".join(v.to_bytes(LINE_BYTES, "little") for _, v in part)
            self.data[:len(part), :LINE_BYTES] = np.frombuffer(raw, np.uint8).reshape(-1, LINE_BYTES)
            errors += await self._run([a for a, _ in part], write=True)
        return errors

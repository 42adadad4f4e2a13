"""Behavioural host memory for unit tests in ``amaranth.sim``."""

import numpy as np

from trainingcxl.hdl.common.line_port import LineOp

__all__ = ["words_to_lines", "row_lines", "host_port_model"]


def words_to_lines(words):
    words = np.asarray(words, dtype=np.uint32)
    pad = (-len(words)) % 16
    words = np.concatenate([words, np.zeros(pad, np.uint32)])
    return [int.from_bytes(words[i:i + 16].tobytes(), "little") for i in range(0, len(words), 16)]


def row_lines(row):
    b = np.asarray(row, dtype=np.int32).tobytes()
    return [int.from_bytes(b[i:i + 64], "little") for i in range(0, len(b), 64)]


def host_port_model(port, memory, rng, writes):
    """Serve one line port from ``memory`` (line address -> int), answering out of order.

    Writes land in ``memory`` and are also recorded in ``writes``."""
    async def tb(ctx):
        pending = []
        t = 0
        ctx.set(port.req.ready, 1)
        while True:
            if ctx.get(port.req.valid):
                p = ctx.get(port.req.payload)
                pending.append((t + rng.randrange(2, 12), p.op, p.addr, p.tag, p.data))
            due = [e for e in pending if e[0] <= t]
            rsp = rng.choice(due) if due else None
            for s in (port.rdata, port.wack):
                ctx.set(s.valid, 0)
            if rsp is not None:
                _, op, addr, tag, data = rsp
                if op == LineOp.READ:
                    ctx.set(port.rdata.payload, {"tag": tag, "data": memory.get(addr, 0), "err": 0})
                    ctx.set(port.rdata.valid, 1)
                    fire = ctx.get(port.rdata.ready)
                else:
                    ctx.set(port.wack.payload, {"tag": tag, "err": 0})
                    ctx.set(port.wack.valid, 1)
                    fire = ctx.get(port.wack.ready)
                if fire:
                    pending.remove(rsp)
                    if op == LineOp.WRITE:
                        writes[addr] = data
                        memory[addr] = data
            await ctx.tick()
            t += 1
    return tb

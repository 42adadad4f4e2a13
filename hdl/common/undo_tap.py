"""The undo tap: how the lookup engine's row reads reach the undo logger.

The lookup engine (``hdl/compute/``) drives it and the undo logger
(``hdl/checkpoint/``) answers, so it sits below both.
"""

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import LINE_BITS

__all__ = ["UndoTapSignature"]


class UndoTapSignature(wiring.Signature):
    """How the lookup engine hands its row reads to the undo logger (seen from the lookup).

    Members
    -------
    peek : Out(1), peek_addr : Out(addr_bits)
        A row's first line will be offered from the next cycle on, and its media
        line: the logger reads the row's stamp meanwhile (block RAM answers a
        cycle later).
    offer : Out(1)
        A row's first line is offered to PMEM, by a descriptor that logs.
    addr, batch : Out
        The media line of that row (the one peeked last), and the batch of the
        descriptor reading it.
    need : In(1)
        That row has no undo record for that batch yet: log it.
    known : In(1)
        ``need`` is known: the row must not be taken before (a registered stamp
        check answers a cycle later).
    room : In(1)
        The logger can take a row now; without room a needed row must wait.
    full : In(1)
        The ring cannot hold another record until a batch after the newest commit is
        durable, which no descriptor running now can bring about: take no more rows
        (waiting would never end); the descriptor fails with ``LOG_TOO_SMALL``.
    take : Out(1)
        The row's first read was issued and is logged: its lines follow on ``lines``.
    lines : Out(stream.Signature(LINE_BITS))
        The lines of taken rows, as PMEM returns them.
    """

    def __init__(self, addr_bits):
        self._addr_bits = addr_bits
        super().__init__({
            "peek": Out(1),
            "peek_addr": Out(addr_bits),
            "offer": Out(1),
            "addr": Out(addr_bits),
            "batch": Out(32),
            "need": In(1),
            "known": In(1, init=1),
            "room": In(1),
            "full": In(1),
            "take": Out(1),
            "lines": Out(stream.Signature(LINE_BITS)),
        })

    def __eq__(self, other):
        return isinstance(other, UndoTapSignature) and other._addr_bits == self._addr_bits

    def __repr__(self):
        return f"UndoTapSignature({self._addr_bits})"

"""The line port: how an engine reads and writes 64-byte lines of a memory.

The same signature serves the PMEM controller's clients and the CXL.cache
agent's clients, so an engine does not care which memory is behind a port.
"""

from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.config import LINE_BITS, LINE_BYTES

__all__ = ["LineOp", "LinePortSignature"]


class LineOp(enum.Enum, shape=1):
    READ = 0
    WRITE = 1


class LinePortSignature(wiring.Signature):
    """Three streams, seen from the engine (the initiator).

    Members
    -------
    req : Out(stream)
        ``op``, line ``addr``, ``tag`` (returned with the response), and for
        writes ``data`` with byte enables ``be``.
    rdata : In(stream)
        Read data with the request's ``tag``; ``err`` when the line could not be
        read (the data is then meaningless).
    wack : In(stream)
        Write completion with the request's ``tag``. For PMEM it means the
        line is persistent; for host memory, that the host has taken the data.

    Responses of one port come back in request order for PMEM and in any order
    for host memory; initiators that need order use the tag.
    """

    def __init__(self, *, addr_bits, tag_bits):
        self._addr_bits = addr_bits
        self._tag_bits = tag_bits
        super().__init__({
            "req": Out(stream.Signature(data.StructLayout({
                "op": LineOp,
                "addr": addr_bits,
                "tag": tag_bits,
                "data": LINE_BITS,
                "be": LINE_BYTES,
            }))),
            "rdata": In(stream.Signature(data.StructLayout({
                "tag": tag_bits,
                "data": LINE_BITS,
                "err": 1,
            }))),
            "wack": In(stream.Signature(data.StructLayout({
                "tag": tag_bits,
                "err": 1,
            }))),
        })

    @property
    def addr_bits(self):
        return self._addr_bits

    @property
    def tag_bits(self):
        return self._tag_bits

    def __eq__(self, other):
        return (isinstance(other, LinePortSignature) and other.addr_bits == self.addr_bits
                and other.tag_bits == self.tag_bits)

    def __repr__(self):
        return f"LinePortSignature(addr_bits={self.addr_bits}, tag_bits={self.tag_bits})"

"""CXL.mem and CXL.cache messages (a simplified subset of CXL 2.0): the wire format.

The gateware (``hdl/cxl/``), the simulation harness and the driver's ports all
read this module. Every channel is a stream (``hdl/cxl/channels.py``) whose
payload is one of the structs below. Field encodings follow the CXL 2.0
specification (section 3.2 for CXL.cache, 3.3 for CXL.mem) where it has them;
fields this model does not need (meta data, snoop types, LD-ID, traffic class)
are left out. Addresses are line addresses, Address[51:6], so a message cannot
be misaligned.

Departures from the specification, all in responses:

* ``S2MNdrOpcode.CmpErr`` completes a write that was refused (unmapped or
  protected address, poisoned data). CXL.mem has no error NDR; a real device
  drops the write and logs the error. The model says so on the wire so that
  the host side sees every refusal.
* A refused read returns ``MemData`` with ``poison`` set, as the specification
  does for data errors.
"""

from amaranth.lib import data, enum

from .config import ADDR_BITS, LINE_BITS, LINE_BYTES

__all__ = [
    "TAG_BITS", "CQID_BITS", "UQID_BITS",
    "M2SReqOpcode", "M2SRwDOpcode", "S2MNdrOpcode", "S2MDrsOpcode",
    "D2HReqOpcode", "H2DRspOpcode",
    "M2SReq", "M2SRwD", "S2MNdr", "S2MDrs", "D2HReq", "H2DRsp", "H2DData", "D2HData",
]

TAG_BITS = 16
CQID_BITS = 12
UQID_BITS = 12


# -- CXL.mem ----------------------------------------------------------------------

class M2SReqOpcode(enum.Enum, shape=4):
    MemInv = 0b0000
    MemRd = 0b0001
    MemRdData = 0b0010
    MemSpecRd = 0b1000


class M2SRwDOpcode(enum.Enum, shape=4):
    MemWr = 0b0001
    MemWrPtl = 0b0010


class S2MNdrOpcode(enum.Enum, shape=3):
    Cmp = 0b000
    CmpErr = 0b111          # not in the specification, see the module docstring


class S2MDrsOpcode(enum.Enum, shape=3):
    MemData = 0b000


class M2SReq(data.Struct):
    """Master to subordinate request without data."""
    opcode: M2SReqOpcode
    tag: TAG_BITS
    addr: ADDR_BITS


class M2SRwD(data.Struct):
    """Master to subordinate request with data; ``be`` matters for ``MemWrPtl`` only."""
    opcode: M2SRwDOpcode
    tag: TAG_BITS
    addr: ADDR_BITS
    poison: 1
    be: LINE_BYTES
    data: LINE_BITS


class S2MNdr(data.Struct):
    """Subordinate to master response without data."""
    opcode: S2MNdrOpcode
    tag: TAG_BITS


class S2MDrs(data.Struct):
    """Subordinate to master response with data."""
    opcode: S2MDrsOpcode
    tag: TAG_BITS
    poison: 1
    data: LINE_BITS


# -- CXL.cache --------------------------------------------------------------------

class D2HReqOpcode(enum.Enum, shape=5):
    RdCurr = 0b00001        # read the current value, no cache state
    RdOwn = 0b00010
    RdShared = 0b00011
    ItoMWr = 0b00110        # write a whole line, host pulls the data
    WrCur = 0b00111         # write the current value, host pulls the data


class H2DRspOpcode(enum.Enum, shape=4):
    WritePull = 0b0001
    GO = 0b0100
    GO_WritePull = 0b0101
    GO_ERR_WritePull = 0b1111


class D2HReq(data.Struct):
    """Device to host request; ``cqid`` names it in the host's answers."""
    opcode: D2HReqOpcode
    cqid: CQID_BITS
    addr: ADDR_BITS


class H2DRsp(data.Struct):
    """Host to device response; for write pulls ``uqid`` is echoed in the data."""
    opcode: H2DRspOpcode
    cqid: CQID_BITS
    uqid: UQID_BITS


class H2DData(data.Struct):
    """Host to device data for a read, by ``cqid``."""
    cqid: CQID_BITS
    poison: 1
    data: LINE_BITS


class D2HData(data.Struct):
    """Device to host data for a write pull, by ``uqid``."""
    uqid: UQID_BITS
    poison: 1
    data: LINE_BITS

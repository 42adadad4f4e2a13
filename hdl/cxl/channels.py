"""The CXL.mem and CXL.cache channels as the device sees them: a stream per message class.

The payloads are the wire format of ``spec/cxl_messages.py``; the directions
here are the gateware's (the device is the CXL.mem subordinate and the
CXL.cache requester), so they stay with the gateware.
"""

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from trainingcxl.spec.cxl_messages import (D2HData, D2HReq, H2DData, H2DRsp, M2SReq, M2SRwD,
                                           S2MDrs, S2MNdr)

__all__ = ["CxlMemSignature", "CxlCacheSignature"]


class CxlMemSignature(wiring.Signature):
    """CXL.mem as seen by the device (the subordinate)."""

    def __init__(self):
        super().__init__({
            "m2s_req": In(stream.Signature(M2SReq)),
            "m2s_rwd": In(stream.Signature(M2SRwD)),
            "s2m_ndr": Out(stream.Signature(S2MNdr)),
            "s2m_drs": Out(stream.Signature(S2MDrs)),
        })

    def __eq__(self, other):
        return isinstance(other, CxlMemSignature)

    def __repr__(self):
        return "CxlMemSignature()"


class CxlCacheSignature(wiring.Signature):
    """CXL.cache as seen by the device (the requester)."""

    def __init__(self):
        super().__init__({
            "d2h_req": Out(stream.Signature(D2HReq)),
            "d2h_data": Out(stream.Signature(D2HData)),
            "h2d_rsp": In(stream.Signature(H2DRsp)),
            "h2d_data": In(stream.Signature(H2DData)),
        })

    def __eq__(self, other):
        return isinstance(other, CxlCacheSignature)

    def __repr__(self):
        return "CxlCacheSignature()"

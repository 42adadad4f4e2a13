"""Packing payloads for the benches: the layouts the HDL uses, field by field."""

import pytest
from amaranth.hdl import signed
from amaranth.lib import data

from trainingcxl.spec.cxl_messages import D2HReq, D2HReqOpcode, M2SRwD, M2SRwDOpcode
from trainingcxl.sim.layouts import pack, unpack


def test_round_trip_with_enums_and_wide_fields():
    value = {"opcode": M2SRwDOpcode.MemWrPtl, "tag": 0xBEEF, "addr": (1 << 45) + 3, "poison": 1,
             "be": 0x8000_0000_0000_0001, "data": (1 << 511) | 5}
    raw = pack(M2SRwD, value)
    layout = data.Layout.cast(M2SRwD)
    assert (raw >> layout["tag"].offset) & 0xFFFF == 0xBEEF
    back = unpack(M2SRwD, raw)
    assert back == {**value, "opcode": M2SRwDOpcode.MemWrPtl}
    assert back.opcode is M2SRwDOpcode.MemWrPtl and back.data == (1 << 511) | 5


def test_signed_fields_and_unknown_values():
    layout = data.StructLayout({"a": 4, "b": signed(6)})
    raw = pack(layout, {"a": 3, "b": -2})
    assert raw == 3 | ((-2 & 0x3F) << 4)
    assert unpack(layout, raw) == {"a": 3, "b": -2}
    # An opcode the enum does not name comes back as its number.
    req = unpack(D2HReq, pack(D2HReq, {"opcode": 0b11111, "cqid": 1, "addr": 2}))
    assert req.opcode == 0b11111 and req.cqid == 1
    with pytest.raises(KeyError):
        pack(D2HReq, {"opcode": D2HReqOpcode.RdCurr, "bogus": 1})

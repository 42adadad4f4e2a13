"""The register map is declared once (``spec/registers.py``); encodings derive from it."""

import pytest

from trainingcxl.hdl.control import ControlWindow
from trainingcxl.spec.presets import PRESETS
from trainingcxl.spec.registers import (COUNTERS, DEVICE_ID, REG, REGISTERS, Access, Kind, Reg,
                                        constants, register)


def test_identity_is_stable():
    # A driver of this map checks this word: changing it is changing the map's version.
    assert DEVICE_ID == 0x5443584C_00000001


def test_encode_decode_round_trip():
    word = REG.DESC_OP.encode(op=2, relaxed=1, coalesced=1, batch=0xDEADBEEF)
    assert word == 2 | 1 << 8 | 1 << 10 | 0xDEADBEEF << 32
    assert REG.DESC_OP.decode(word) == {"op": 2, "relaxed": 1, "nolog": 0, "coalesced": 1,
                                        "batch": 0xDEADBEEF}
    assert REG.CKPT_STATE.get(0xABCD << 16 | 1 << 3, "gen") == 0xABCD


def test_encode_refuses_what_does_not_fit():
    with pytest.raises(ValueError, match="DESC_SIZE.n_bags = 16777216 does not fit 24 bits"):
        REG.DESC_SIZE.encode(n_bags=1 << 24)
    with pytest.raises(KeyError, match="no field 'bogus'"):
        REG.DESC_OP.encode(bogus=1)


def test_addresses_and_names_are_one_map():
    assert [r.addr for r in REGISTERS] == sorted(r.addr for r in REGISTERS)
    for r in REGISTERS:
        assert Reg[r.name] == r.addr and register(r.addr) is r and register(r.name) is r


def test_layouts_match_fields():
    layout = REG.CKPT_STATE.layout
    assert layout.size == 64
    assert layout["gen"].offset == 16 and layout["gen"].width == 16


def test_control_window_takes_every_device_register():
    """Every read-only register that is not a constant and that the window does not
    compute itself is an input port of the window: adding one to the map adds the port."""
    ports = set(ControlWindow.COUNTERS)
    assert {Reg[r.name] for r in COUNTERS} - {Reg.CYCLES} <= ports
    assert Reg.CKPT_STATE in ports and Reg.MEM_ERROR_LOG3 in ports
    assert not ports & {Reg.ID, Reg.STATUS, Reg.COMPLETED, Reg.DESC_OP}
    assert all(register(r).access is Access.RO for r in ports)


def test_constants_describe_the_configuration():
    cfg = PRESETS["small"]
    geo = REG.GEOMETRY.decode(constants(cfg)["GEOMETRY"])
    assert geo == {"tables": 4, "dim": 16, "lines_per_row": 1, "frac_bits": 16, "max_pooling": 16}
    assert set(constants(cfg)) == {r.name for r in REGISTERS if r.kind is Kind.CONST}

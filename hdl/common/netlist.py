"""The platform the simulators' netlist is elaborated for.

Blocks whose plain logic is costly to convert or to simulate elaborate, for
this platform, to instances of behavioural Verilog modules that the export
appends to the netlist: RAMs whose size is a parameter (:mod:`.ram`) and CRC
networks (:mod:`trainingcxl.hdl.checkpoint.crc`). For synthesis and for
Amaranth's simulator they stay plain Amaranth.
"""

__all__ = ["NETLIST", "behavioural"]


class _Netlist:
    """The platform :func:`trainingcxl.hdl.export.convert` elaborates with."""
    behavioural_models = True

    def __repr__(self):
        return "NETLIST"


NETLIST = _Netlist()


def behavioural(platform):
    """Whether ``platform`` asks for behavioural models (the simulators' netlist)."""
    return getattr(platform, "behavioural_models", False)

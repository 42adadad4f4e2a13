"""Formal harnesses: Amaranth ``Assert``/``Assume`` around the device's blocks.

The properties live here, not in the blocks, so simulation and FPGA builds
never see them; ``sim/formal.py`` converts a harness to RTLIL and proves it
with SymbiYosys (``yowasp-sby``).
"""

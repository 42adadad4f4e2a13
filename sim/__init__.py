"""Simulation harness: cocotb bus-functional models of the host side, the runner and its
build cache, formal runs. The jobs it runs are in :mod:`.jobs`."""

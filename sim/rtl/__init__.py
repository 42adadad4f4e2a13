"""Simulation-only gateware: models of the device's surroundings that run inside the
simulator (never synthesised), so that bulk traffic needs no Python."""

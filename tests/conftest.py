"""Fixtures shared by the tests of several layers."""

import pytest


@pytest.fixture(params=["verilator", "icarus"])
def sim(request):
    """The simulator a cocotb test runs under: the test runs once under each."""
    return request.param

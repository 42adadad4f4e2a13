"""Amaranth gateware of the trainingcxl device.

Subpackages: ``common`` (ports and small building blocks shared by the
engines), ``cxl`` (message layouts, CXL.mem target, CXL.cache agent), ``pmem``
(controller model with a volatile write-pending queue) and ``compute`` (lookup
engine). :mod:`.top` assembles the device, :mod:`.control` is its register
window.
"""

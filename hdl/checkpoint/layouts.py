"""Header line layout of the checkpoint records, built from host/records.py's field list."""

from amaranth.lib import data

from trainingcxl.host.records import HEADER_FIELDS

__all__ = ["header_layout"]

#: The fields of every undo, commit and snapshot header, from bit 0 of the line.
header_layout = data.StructLayout(dict(HEADER_FIELDS))

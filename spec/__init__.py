"""The specification of the trainingcxl device: everything the gateware, the
models, the drivers and the documentation must agree on, declared once.

* :mod:`.config`: the configuration object, its presets and the media map;
* :mod:`.registers`: the control window's register map, as data;
* :mod:`.descriptors`: descriptor operations, error codes and layouts;
* :mod:`.records`: the undo, commit and snapshot records and their CRC;
* :mod:`.cxl_messages`: the CXL.mem and CXL.cache messages (the wire format);
* :mod:`.host_layout`: where a batch's arrays sit in host memory;
* :mod:`.bridge_protocol`: the UART bridge's framing.

This package imports nothing else of the project.
"""

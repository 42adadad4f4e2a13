"""The device driver (:class:`.device.Device`) and its transports."""

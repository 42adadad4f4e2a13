"""What a board adds around the device: UART, host bridge, GPU memory window."""

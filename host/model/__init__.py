"""Models of the host side: golden model, DLRM, GPU timing, data, reference recovery, energy."""

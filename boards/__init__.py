"""FPGA boards: thin top levels (``ulx3s.py``), the board list (``targets.py``) and
bitstream builds with the YoWASP tools (``build.py``)."""

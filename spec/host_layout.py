"""Where a batch's arrays sit in host (GPU) memory: shared by the benches and the board."""

from .config import LINE_BYTES

__all__ = ["HostLayout"]


class HostLayout:
    """The host memory the device reads and writes over CXL.cache, in lines.

    From host line ``base``: two slots, by batch parity, each holding a batch's
    indices, offsets and pooled vectors (so that batch n+1 can be looked up
    while batch n's arrays are still needed by its update, in relaxed order);
    then the update deltas; then the GPU's staged copy of the MLP parameters
    that ``SNAPSHOT_MLP`` pulls. Every region is sized for the largest batch
    the configuration allows (``max_bags``, ``max_pooling``).
    """

    #: Host line address of the layout on the simulated host (byte address 16 MiB).
    BASE = 0x40000

    def __init__(self, config, *, base=BASE):
        cfg = config
        self.base = base
        idx = -(-cfg.max_bags * cfg.max_pooling * 4 // LINE_BYTES)
        off = -(-(cfg.max_bags + 1) * 4 // LINE_BYTES)
        out = cfg.max_bags * cfg.lines_per_row
        slot = idx + off + out
        self.idx_lines = [base + k * slot for k in range(2)]
        self.off_lines = [a + idx for a in self.idx_lines]
        self.out_lines = [a + off for a in self.off_lines]
        self.delta_line = base + 2 * slot
        self.mlp_line = self.delta_line + out
        self.lines = 2 * slot + out + cfg.mlp_lines

    def __contains__(self, line):
        return self.base <= line < self.base + self.lines

"""Cycle cost of the GPU's share of a training step (the dense MLPs)."""

from dataclasses import dataclass

__all__ = ["GpuCost", "step_cost", "embedding_cycles"]


@dataclass(frozen=True)
class GpuCost:
    flops: int
    bytes: int
    kernels: int
    cycles: int


def _mlp_widths(config):
    shape = config.model
    n_vec = config.model_tables + 1
    bottom = (shape.dense_features, *shape.bottom_hidden, config.dim)
    top = (config.dim + n_vec * (n_vec - 1) // 2, *shape.top_hidden, 1)
    return [(i, o) for i, o in zip(bottom, bottom[1:])] + [(i, o) for i, o in zip(top, top[1:])]


def step_cost(config, batch_size):
    """Cost of forward, backward and SGD of the dense part for one batch.

    Per layer of ``i`` inputs and ``o`` outputs: ``2*B*i*o`` FLOPs forward and
    twice that backward (input and weight gradients), three kernels; the
    interaction costs ``2*B*(T+1)**2*dim`` FLOPs each way; the loss and the
    optimiser one kernel each. Memory traffic: every parameter read, its
    gradient written and read, the parameter written (16 bytes each), plus
    each activation written forward and read backward (8 bytes each). Cycles
    are ``launches + FLOPs / flops_per_cycle + bytes / bytes_per_cycle`` with
    the :class:`~trainingcxl.spec.config.GpuTiming` of ``config``.
    """
    b = batch_size
    layers = _mlp_widths(config)
    n_vec = config.model_tables + 1
    flops = sum(6 * b * i * o for i, o in layers) + 4 * b * n_vec * n_vec * config.dim
    params = sum(i * o + o for i, o in layers)
    activations = b * (sum(o for _, o in layers) + n_vec * config.dim)
    nbytes = 16 * params + 8 * activations
    kernels = 3 * len(layers) + 4
    t = config.gpu
    cycles = (kernels * t.launch_cycles + -(-flops // t.flops_per_cycle)
              + -(-nbytes // t.bytes_per_cycle))
    return GpuCost(flops=flops, bytes=nbytes, kernels=kernels, cycles=cycles)


def embedding_cycles(config, *, gathered, rows, bags, update):
    """Cycles the GPU spends on the embedding work of the ``pmem`` system (no near-memory compute).

    Pooling reads the ``gathered`` rows (duplicates included) and writes ``bags``
    pooled vectors; an update reads the ``bags`` deltas and rewrites the
    ``rows`` distinct rows (read and write). One kernel each; memory bound at
    ``gpu.bytes_per_cycle``. Pooling reads a row from the GPU's memory once for all
    its repeats when the batch's distinct rows fit in the L2 cache
    (``gpu.l2_bytes``), and once per index when they do not."""
    row_bytes = config.dim * 4
    t = config.gpu
    if update:
        nbytes = bags * row_bytes + 2 * rows * row_bytes + 4 * gathered
    else:
        reads = rows if rows * row_bytes <= t.l2_bytes else gathered
        nbytes = reads * row_bytes + bags * row_bytes + 4 * gathered
    return t.launch_cycles + -(-nbytes // t.bytes_per_cycle)

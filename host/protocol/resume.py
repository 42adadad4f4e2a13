"""After a power failure: check what RECOVER left against the golden model's history, and
resume the host's models from it (shared by the simulated and the board training drivers)."""

import numpy as np

from trainingcxl.host.model.dlrm import DenseModel, Gpu

__all__ = ["recovered_state_matches", "resume_models"]


def recovered_state_matches(history, d, m, tables, params):
    """``(tables_ok, mlp_ok)``: the device's tables equal the golden ones after batch ``d``,
    and the snapshot's parameters (``None`` if no valid one) equal the MLP after batch ``m``,
    bit for bit. ``history`` is the run's
    :class:`~trainingcxl.host.model.history.GoldenHistory`; it is left as it is."""
    tables_ok = history.tables_equal(d, tables)
    kept = history.mlp(m)
    mlp_ok = (params is not None and kept is not None
              and np.array_equal(params.view(np.uint32), kept[0].view(np.uint32)))
    return tables_ok, mlp_ok


def resume_models(config, seed, history, d, m, params):
    """The golden model, the float32 reference and the GPU resumed at ``d`` with the MLP of
    ``m`` (the GPU's from the snapshot ``params``): ``history``'s trainers, rolled back to
    ``d``; it forgets every batch after ``d``."""
    history.resume(d, m)
    model = DenseModel(config, seed)
    model.load_parameters(params)
    return history.golden, history.reference, Gpu(config, model, own=history.golden.own)

"""After a power failure: check what RECOVER left against the golden model's history, and
resume the host's models from it (shared by the simulated and the board training drivers)."""

import copy

import numpy as np

from trainingcxl.host.model.dlrm import DenseModel, Gpu

__all__ = ["recovered_state_matches", "resume_models"]


def recovered_state_matches(history, mlp_history, d, m, tables, params):
    """``(tables_ok, mlp_ok)``: the device's tables equal the golden ones after batch ``d``,
    and the snapshot's parameters (``None`` if no valid one) equal the MLP after batch ``m``,
    bit for bit. ``history[b]`` is ``(golden, reference)`` after batch ``b``."""
    tables_ok = d in history and all(np.array_equal(g, w)
                                     for g, w in zip(tables, history[d][0].tables))
    mlp_ok = (params is not None and m in mlp_history
              and np.array_equal(params.view(np.uint32), mlp_history[m].view(np.uint32)))
    return tables_ok, mlp_ok


def resume_models(config, seed, history, mlp_history, d, m, params):
    """The golden model, the float32 reference and the GPU resumed at ``d`` with the MLP of
    ``m`` (the GPU's from the snapshot ``params``); forgets the history after ``d``."""
    golden, reference = copy.deepcopy(history[d][0]), copy.deepcopy(history[d][1])
    golden.dense.load_parameters(mlp_history[m])
    reference.dense.load_parameters(history[m][1].dense.parameters())
    model = DenseModel(config, seed)
    model.load_parameters(params)
    for later in [x for x in history if x > d]:
        del history[later]
        mlp_history.pop(later, None)
    return golden, reference, Gpu(config, model)

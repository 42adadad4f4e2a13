"""A trained model in a form a PyTorch user loads in two lines.

:func:`export_model` writes ``model.npz``: float32 arrays named as the state
dict of the usual PyTorch DLRM (the module in docs/usage.md, "Exporting a
model") names its parameters, and ``model.json`` with the shapes and this key
map:

* ``embeddings.{t}.weight``: table ``t`` as ``(rows, dim)``, for an
  ``nn.EmbeddingBag(rows, dim, mode="sum")``; fixed-point tables are divided by
  ``2**frac_bits``;
* ``bottom_mlp.{2i}.weight`` and ``.bias``: the ``i``-th linear layer of the
  bottom MLP, an ``nn.Sequential`` of ``nn.Linear`` and ``nn.ReLU`` (a ReLU after
  every layer), weight ``(out, in)``;
* ``top_mlp.{2i}.weight`` and ``.bias``: the top MLP, likewise, without a ReLU
  after its last layer (it gives the logit).

The interaction is the DLRM's dot product: the bottom MLP's output ``x`` and
the pooled vectors of tables 0, 1, ... form ``T + 1`` vectors; the top MLP
reads ``x`` followed by their dot products ``z_i . z_j`` for ``i < j`` in
row-major order (``torch.triu_indices(T + 1, T + 1, 1)``).
"""

import json
from pathlib import Path

import numpy as np

from trainingcxl.host.model.fixed import from_fixed

__all__ = ["export_model", "load_exported", "exported_logits"]


def export_model(config, tables, dense_model, folder):
    """Write ``model.npz`` and ``model.json`` of ``tables`` (fixed-point int32 or float) and
    ``dense_model`` into ``folder``; returns the path of ``model.npz``. Each file is
    complete or absent."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for t, table in enumerate(tables):
        table = np.asarray(table)
        if np.issubdtype(table.dtype, np.integer):
            table = from_fixed(table, config.fixed.frac_bits)
        arrays[f"embeddings.{t}.weight"] = table.astype(np.float32)
    for part, layers in (("bottom_mlp", dense_model.bottom), ("top_mlp", dense_model.top)):
        for i, (w, b) in enumerate(layers):
            arrays[f"{part}.{2 * i}.weight"] = np.asarray(w, dtype=np.float32)
            arrays[f"{part}.{2 * i}.bias"] = np.asarray(b, dtype=np.float32)
    shape = config.model
    meta = {
        "format": "trainingcxl DLRM state dict, float32",
        "tables": list(config.tables), "dim": config.dim,
        "dense_features": shape.dense_features,
        "bottom_mlp": [shape.dense_features, *shape.bottom_hidden, config.dim],
        "top_mlp": [config.dim + dense_model.n_pairs, *shape.top_hidden, 1],
        "frac_bits": config.fixed.frac_bits,
        "interaction": "dot products of [bottom output, pooled table 0..T-1], pairs i < j "
                       "row-major, appended after the bottom output",
        "keys": sorted(arrays),
    }
    out = folder / "model.npz"
    tmp = folder / "model.tmp.npz"
    np.savez(tmp, **arrays)
    tmp.replace(out)
    (folder / "model.json.tmp").write_text(json.dumps(meta, indent=2) + "\n")
    (folder / "model.json.tmp").replace(folder / "model.json")
    return out


def load_exported(folder):
    """``(arrays, meta)`` of an exported model."""
    folder = Path(folder)
    with np.load(folder / "model.npz") as data:
        arrays = {k: data[k] for k in data.files}
    return arrays, json.loads((folder / "model.json").read_text())


def exported_logits(arrays, dense, indices, offsets):
    """The logits of an exported model on a CSR batch (bag ``k`` of table ``k % T``),
    computed from the key map alone, in float32 as PyTorch would."""
    tables = [arrays[f"embeddings.{t}.weight"] for t in range(_count(arrays, "embeddings"))]
    n_tables = len(tables)
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    bag_of = np.repeat(np.arange(len(lengths)), lengths)
    idx = np.asarray(indices, dtype=np.int64)
    pooled = np.zeros((len(lengths), tables[0].shape[1]), dtype=np.float32)
    for t, table in enumerate(tables):
        sel = bag_of % n_tables == t
        np.add.at(pooled, bag_of[sel], table[idx[sel]])
    x = _mlp(arrays, "bottom_mlp", np.asarray(dense, dtype=np.float32), relu_last=True)
    z = np.concatenate([x[:, None, :], pooled.reshape(len(x), n_tables, -1)], axis=1)
    i, j = np.triu_indices(n_tables + 1, k=1)
    dots = np.einsum("bid,bjd->bij", z, z)[:, i, j]
    return _mlp(arrays, "top_mlp", np.concatenate([x, dots], axis=1), relu_last=False)[:, 0]


def _count(arrays, part):
    return len(_indices(arrays, part))


def _indices(arrays, part):
    return sorted({int(k.split(".")[1]) for k in arrays if k.startswith(part + ".")})


def _mlp(arrays, part, x, relu_last):
    layers = _indices(arrays, part)
    for pos, i in enumerate(layers):
        x = x @ arrays[f"{part}.{i}.weight"].T + arrays[f"{part}.{i}.bias"]
        if relu_last or pos < len(layers) - 1:
            x = np.maximum(x, 0)
    return x

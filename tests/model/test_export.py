"""The exported model: its key map reproduces the host model's predictions (and PyTorch's,
where PyTorch is installed)."""

import json

import numpy as np
import pytest

from trainingcxl.spec.config import Config, ModelShape
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.dlrm import FixedPointTrainer
from trainingcxl.host.model.evaluate import predict
from trainingcxl.host.model.export import export_model, exported_logits, load_exported

CFG = Config(tables=(40, 30, 20), max_pooling=4, max_bags=512,
             model=ModelShape(dense_features=5, bottom_hidden=(8,), top_hidden=(6, 4), lr=0.1))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    wl = SyntheticWorkload(CFG, seed=1, batch_size=16, min_pooling=1)
    trainer = FixedPointTrainer(CFG, initial_tables(CFG, seed=1), seed=1)
    for i in range(20):
        trainer.step(wl.batch(i))
    folder = tmp_path_factory.mktemp("export")
    export_model(CFG, trainer.tables, trainer.dense, folder)
    return wl, trainer, folder


def test_export_has_the_documented_keys_and_shapes(trained):
    _, trainer, folder = trained
    arrays, meta = load_exported(folder)
    assert sorted(arrays) == meta["keys"]
    for t, rows in enumerate(CFG.tables):
        assert arrays[f"embeddings.{t}.weight"].shape == (rows, CFG.dim)
        assert arrays[f"embeddings.{t}.weight"].dtype == np.float32
    assert arrays["bottom_mlp.0.weight"].shape == (8, 5)
    assert arrays["bottom_mlp.2.weight"].shape == (CFG.dim, 8)
    assert [arrays[f"top_mlp.{i}.weight"].shape[0] for i in (0, 2, 4)] == [6, 4, 1]
    assert meta["top_mlp"] == [CFG.dim + 6, 6, 4, 1]          # 4 vectors: 6 pairs
    np.testing.assert_array_equal(arrays["embeddings.1.weight"] * 2 ** CFG.fixed.frac_bits,
                                  trainer.tables[1])
    assert not list(folder.glob("*.tmp*"))


def test_exported_model_reproduces_the_host_models_predictions(trained):
    wl, trainer, folder = trained
    arrays, _ = load_exported(folder)
    for i in range(100, 103):
        batch = wl.batch(i)
        want = predict(CFG, trainer.tables, trainer.dense, batch)
        got = exported_logits(arrays, batch.dense, batch.indices, batch.offsets)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_pytorch_loads_the_export_in_two_lines(trained):
    """The PyTorch module of docs/usage.md ("Exporting a model") loads the state dict and
    predicts what the host model predicts."""
    torch = pytest.importorskip("torch")
    from torch import nn

    class DLRM(nn.Module):
        def __init__(self, tables, dim, bottom, top):
            super().__init__()
            self.embeddings = nn.ModuleList(nn.EmbeddingBag(n, dim, mode="sum") for n in tables)
            self.bottom_mlp = nn.Sequential(*[m for a, b in zip(bottom, bottom[1:])
                                              for m in (nn.Linear(a, b), nn.ReLU())])
            top_layers = [m for a, b in zip(top, top[1:]) for m in (nn.Linear(a, b), nn.ReLU())]
            self.top_mlp = nn.Sequential(*top_layers[:-1])

        def forward(self, dense, bags):        # bags: one (indices, offsets) a table
            x = self.bottom_mlp(dense)
            z = torch.stack([x] + [e(i, o) for e, (i, o) in zip(self.embeddings, bags)], dim=1)
            i, j = torch.triu_indices(z.shape[1], z.shape[1], 1)
            dots = torch.bmm(z, z.transpose(1, 2))[:, i, j]
            return self.top_mlp(torch.cat([x, dots], dim=1))[:, 0]

    wl, trainer, folder = trained
    meta = json.loads((folder / "model.json").read_text())
    model = DLRM(meta["tables"], meta["dim"], meta["bottom_mlp"], meta["top_mlp"])
    state = {k: torch.from_numpy(v) for k, v in np.load(folder / "model.npz").items()}
    model.load_state_dict(state)
    batch = wl.batch(200)
    t = CFG.n_tables
    bags = []
    for table in range(t):
        lengths = np.diff(batch.offsets.astype(np.int64))[table::t]
        starts = batch.offsets[:-1].astype(np.int64)[table::t]
        idx = np.concatenate([batch.indices[s:s + n] for s, n in zip(starts, lengths)])
        bags.append((torch.from_numpy(idx.astype(np.int64)),
                     torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)[:-1]]))))
    with torch.no_grad():
        got = model(torch.from_numpy(batch.dense), bags).numpy()
    want = predict(CFG, trainer.tables, trainer.dense, batch)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

"""Criteo-format loader and sample generator."""

import numpy as np
import pytest

from trainingcxl.spec.config import Config, ModelShape
from trainingcxl.host.model.criteo import CriteoDataset, CriteoFormatError, write_sample
from trainingcxl.host.model.dlrm import FixedPointTrainer, FloatTrainer
from trainingcxl.host.model.data import initial_tables
from trainingcxl.host.model.golden import check_batch

CFG = Config(tables=(97, 50, 211, 13), max_pooling=1, max_bags=512,
             model=ModelShape(dense_features=13, bottom_hidden=(16,), top_hidden=(16,), lr=0.1))


def line(label="1", dense=None, cats=None):
    dense = dense if dense is not None else ["1"] * 13
    cats = cats if cats is not None else ["0a1b2c3d"] * 26
    return "\t".join([label, *dense, *cats]) + "\n"


def test_parsing_hashing_and_missing_values(tmp_path):
    p = tmp_path / "d.tsv"
    p.write_text(line(dense=["", "-2", "7"] + ["0"] * 10, cats=["", "ff", "10", "1"] + ["a"] * 22)
                 + line(label="0"))
    ds = CriteoDataset(CFG, p, batch_size=2)
    assert len(ds) == 2
    np.testing.assert_allclose(ds.dense[0, :3], [0, 0, np.log1p(7)], rtol=1e-6)
    assert ds.rows[0].tolist() == [0, 0xFF % 50, 0x10 % 211, 1]
    b = ds.batch(0)
    check_batch(CFG, b.indices, b.offsets)
    assert b.labels.tolist() == [1, 0] and b.n_bags == 8


@pytest.mark.parametrize("bad,reason", [
    (line(label="2"), "label '2'"),
    (line(dense=["x"] + ["1"] * 12), "integer column I1 is 'x'"),
    (line(cats=["zz"] + ["1"] * 25), "categorical column C1 is 'zz'"),
    ("1\t2\t3\n", "3 columns, expected 40"),
    (line(dense=["9" * 400] + ["1"] * 12), "not an integer of at most 18 digits"),
    (line(dense=["0x5"] + ["1"] * 12), "integer column I1"),
    (line(cats=["1" * 17] + ["1"] * 25), "at most 16 digits"),
    (line(cats=["-5"] + ["1"] * 25), "categorical column C1 is '-5'"),
])
def test_malformed_lines_raise_with_line_number_or_are_skipped(tmp_path, bad, reason):
    p = tmp_path / "d.tsv"
    p.write_text(line() + bad + line())
    with pytest.raises(CriteoFormatError, match=f"d.tsv:2: .*{reason}"):
        CriteoDataset(CFG, p, batch_size=2)
    ds = CriteoDataset(CFG, p, batch_size=2, on_error="skip")
    assert len(ds) == 2 and ds.skipped == 1 and reason.split()[0] in ds.problems[0]


def test_sample_is_deterministic_and_learnable(tmp_path):
    a = write_sample(tmp_path / "a.tsv", lines=3000, seed=1)
    b = write_sample(tmp_path / "b.tsv", lines=3000, seed=1)
    assert a.read_text() == b.read_text()
    ds = CriteoDataset(CFG, a, batch_size=100)
    tables = initial_tables(CFG, seed=0)
    fixed, ref = FixedPointTrainer(CFG, tables, seed=0), FloatTrainer(CFG, tables, seed=0)
    lf, lr = [], []
    for i in range(120):
        lf.append(fixed.step(ds.batch(i)).loss)
        lr.append(ref.step(ds.batch(i)).loss)
    assert np.mean(lf[-15:]) < 0.9 * np.mean(lf[:15])
    assert abs(np.mean(lf[-15:]) - np.mean(lr[-15:])) <= 0.02 * np.mean(lr[-15:])


def test_non_ascii_bytes_are_a_clear_error(tmp_path):
    p = tmp_path / "d.tsv"
    p.write_bytes(line().encode() + b"1\t\xff" + line()[2:].encode() + line().encode())
    with pytest.raises(CriteoFormatError, match="d.tsv:2: a byte that is not ASCII at column 3"):
        CriteoDataset(CFG, p, batch_size=2)
    assert len(CriteoDataset(CFG, p, batch_size=2, on_error="skip")) == 2


def test_full_width_hex_ids_hash_without_overflow(tmp_path):
    p = tmp_path / "d.tsv"
    p.write_text(line(cats=["ffffffffffffffff"] * 26))
    ds = CriteoDataset(CFG, p, batch_size=1)
    assert ds.rows[0].tolist() == [(2**64 - 1) % r for r in CFG.tables]

"""Criteo-format loader and sample generator."""

import numpy as np
import pytest

from trainingcxl.spec.config import Config, ModelShape
from trainingcxl.host.model.criteo import (CriteoDataset, CriteoFormatError, _parse, iter_chunks,
                                         parse_block, write_sample)
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


def test_blocks_of_any_size_give_the_same_samples_and_line_numbers(tmp_path):
    p = tmp_path / "d.tsv"
    lines = [line(label=str(k % 2), dense=[str(k)] * 13, cats=[f"{k * 7919:x}"] * 26)
             for k in range(40)]
    lines[3] = "\n"                                   # blank lines are passed over
    lines[7] = lines[7].replace("\n", "\r\n")         # and a CRLF ending is fine
    p.write_text("".join(lines) + line(label="0").rstrip("\n"))     # no final newline
    whole = parse_block(p.read_bytes(), CFG.tables)
    assert len(whole) == 40 and whole.lines == 41
    for size in (50, 333, 4096):                      # 50: every line longer than a block
        parts = list(iter_chunks(p, CFG.tables, chunk_bytes=size))
        assert sum(c.lines for c in parts) == 41
        for field in ("labels", "dense", "rows"):
            np.testing.assert_array_equal(np.concatenate([getattr(c, field) for c in parts]),
                                          getattr(whole, field))
    bad = p.read_text().splitlines(keepends=True)
    bad[29] = line(cats=["xyz"] + ["1"] * 25)
    p.write_text("".join(bad))
    for size in (50, 333, 1 << 20):
        with pytest.raises(CriteoFormatError, match="d.tsv:30: categorical column C1 is 'xyz'"):
            list(iter_chunks(p, CFG.tables, chunk_bytes=size))


def test_rows_fit_tables_of_any_size(tmp_path):
    tables = (1 << 24, (1 << 24) - 1, 1_000_003, 7, 1)
    cfg = Config(tables=tables, max_pooling=1, max_bags=64,
                 model=ModelShape(bottom_hidden=(16,), top_hidden=(16,)))
    ids = ["ffffffffffffffff", "8000000000000001", "FEDCBA9876543210", "1", ""]
    p = tmp_path / "d.tsv"
    p.write_text(line(cats=ids + ["0"] * 21))
    ds = CriteoDataset(cfg, p, batch_size=1)
    assert ds.rows[0].tolist() == [int(v or "0", 16) % r for v, r in zip(ids, tables)]
    assert (ds.labels.dtype, ds.dense.dtype, ds.rows.dtype) == (np.float32, np.float32, np.uint32)
    assert ds.dense.shape == (1, 13) and ds.rows.shape == (1, len(tables))


def test_skipped_lines_are_counted_and_the_first_reasons_kept(tmp_path):
    p = tmp_path / "d.tsv"
    p.write_text("".join(line(label="7") if k % 3 == 0 else line() for k in range(30)))
    ds = CriteoDataset(CFG, p, batch_size=2, on_error="skip")
    assert len(ds) == 20 and ds.skipped == 10 and len(ds.problems) == 5
    assert ds.problems[0].endswith("d.tsv:1: label '7' is not 0 or 1")
    assert ds.problems[4].startswith(f"{p}:13: ")


def test_a_large_sample_is_written_and_read_back(tmp_path):
    p = write_sample(tmp_path / "big.tsv", lines=50_000, seed=2, block=4096)
    text = p.read_bytes()
    assert text.count(b"\n") == 50_000 and text.endswith(b"\n")
    ds = CriteoDataset(CFG, p, batch_size=128)
    assert len(ds) == 50_000 and ds.skipped == 0
    assert 0.05 < ds.labels.mean() < 0.95
    assert 0.02 < (ds.rows[:, 0] == 0).mean() < 0.1        # about 5% missing, and row 0
    first = text.split(b"\n", 1)[0].decode().split("\t")
    label, dense, cats = _parse("\t".join(first), "x:1")
    assert ds.labels[0] == label and ds.rows[0].tolist() == [0 if c is None else c % r
                                                             for c, r in zip(cats, CFG.tables)]

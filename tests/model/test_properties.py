"""Property-based tests (hypothesis) of the host-side parsers and the golden model."""

import math

import numpy as np
from hypothesis import given, settings, strategies as st

from trainingcxl.spec.config import Config, ConfigError
from trainingcxl.host.model.criteo import N_CAT, N_DENSE, CriteoFormatError, _parse, parse_block
from trainingcxl.host.model.golden import embedding_bag_sum

# Derandomized: CI runs the same examples every time.
PROPERTY = settings(max_examples=300, deadline=None, derandomize=True)

dense = st.one_of(st.none(), st.integers(-10**17, 10**18 - 1))
cat = st.one_of(st.none(), st.integers(0, 2**64 - 1))


@PROPERTY
@given(st.sampled_from([0, 1]), st.lists(dense, min_size=N_DENSE, max_size=N_DENSE),
       st.lists(cat, min_size=N_CAT, max_size=N_CAT), st.booleans())
def test_criteo_lines_parse_back(label, ints, cats, upper):
    def hexa(c):
        text = f"{c:x}"
        return text.upper() if upper else text
    line = "\t".join([str(label)] + ["" if v is None else str(v) for v in ints]
                     + ["" if c is None else hexa(c) for c in cats]) + "\n"
    got_label, got_dense, got_cats = _parse(line, "x:1")
    assert got_label == label
    want = [0.0 if v is None else math.log1p(max(v, 0)) for v in ints]
    np.testing.assert_allclose(got_dense, np.float32(want), rtol=1e-6)
    assert got_cats == cats


@PROPERTY
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400))
def test_any_text_parses_or_is_refused_with_its_place(text):
    try:
        _parse(text, "file.tsv:7")
    except CriteoFormatError as e:
        assert str(e).startswith("file.tsv:7: ")


@PROPERTY
@given(st.lists(st.sampled_from(list(range(1 + N_DENSE + N_CAT))), min_size=1, max_size=3),
       st.text(alphabet="0123456789abcdefxyz-+ .g", min_size=1, max_size=20))
def test_a_damaged_column_is_refused(columns, junk):
    fields = ["1"] + ["5"] * N_DENSE + ["a1"] * N_CAT
    for c in columns:
        fields[c] = junk
    line = "\t".join(fields)
    try:
        _parse(line, "f:2")
    except CriteoFormatError:
        return
    # Accepted only if every damaged column still holds a valid value for its kind.
    for c in columns:
        if c == 0:
            assert junk in ("0", "1")
        elif c <= N_DENSE:
            assert junk.lstrip("-").isdigit() and len(junk.lstrip("-")) <= 18
        else:
            int(junk, 16)



def line_by_line(data, tables):
    """The loader's semantics, one line at a time with the exact parser: (samples, refused)."""
    samples, refused = [], []
    for n, raw in enumerate(data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"),
                            start=1):
        try:
            text = raw.decode("ascii")
            if not text.strip():
                continue
            label, dense_values, cats = _parse(text, f"x:{n}")
        except (CriteoFormatError, UnicodeDecodeError):
            refused.append(n)
            continue
        samples.append((label, dense_values, [0 if c is None else c % r for c, r in zip(cats, tables)]))
    return samples, refused


# Fields near their limits, and junk: lengths 17-19, signs, letters, white space, non-ASCII.
field = st.one_of(
    st.just(""), st.integers(-10**18, 10**19).map(str), st.integers(0, 2**68).map(lambda v: f"{v:x}"),
    st.integers(0, 2**64 - 1).map(lambda v: f"{v:X}"), st.sampled_from(["0", "1", "-", "-0", "+1", " 1",
                                                                        "1\r", "g", "\x0b", "é"]),
    st.text(alphabet="0123456789abcdefABCDEF-xz \r\x1c", max_size=20))
good_line = st.tuples(st.sampled_from(["0", "1"]),
                      st.lists(st.one_of(st.just(""), st.integers(-10**17, 10**18 - 1).map(str)),
                               min_size=N_DENSE, max_size=N_DENSE),
                      st.lists(st.one_of(st.just(""), st.integers(0, 2**64 - 1).map(lambda v: f"{v:x}")),
                               min_size=N_CAT, max_size=N_CAT)).map(lambda t: [t[0], *t[1], *t[2]])


@st.composite
def criteo_lines(draw):
    fields = draw(good_line)
    for _ in range(draw(st.integers(0, 2))):       # damage a few columns
        fields[draw(st.integers(0, len(fields) - 1))] = draw(field)
    text = "\t".join(fields)
    shape = draw(st.sampled_from(["", "", "", "drop", "extra", "blank", "cr"]))
    if shape == "drop":
        text = text.rsplit("\t", 1)[0]
    elif shape == "extra":
        text += "\t"
    elif shape == "blank":
        text = draw(st.text(alphabet=" \t\r\x0b\x0c\x1c", max_size=4))
    elif shape == "cr":
        text += "\r" * draw(st.integers(1, 2))
    return text


@PROPERTY
@given(st.lists(criteo_lines(), min_size=1, max_size=6), st.booleans(),
       st.lists(st.integers(1, 2**24), min_size=1, max_size=N_CAT))
def test_the_block_parser_agrees_with_the_exact_parser(lines, final_newline, tables):
    data = "\n".join(lines).encode("utf-8") + (b"\n" if final_newline else b"")
    samples, refused = line_by_line(data, tables)
    chunk = parse_block(data, tables, where="x", on_error="skip")
    assert chunk.skipped == len(refused)
    assert [p.split(":")[1] for p in chunk.problems] == [str(n) for n in refused[:5]]
    assert len(chunk) == len(samples)
    for k, (label, dense_values, rows) in enumerate(samples):
        assert chunk.labels[k] == label
        np.testing.assert_array_equal(chunk.dense[k], dense_values)
        assert chunk.rows[k].tolist() == rows
    if refused:
        try:
            parse_block(data, tables, where="x")
        except CriteoFormatError as e:
            assert str(e).startswith(f"x:{refused[0]}: ")
        else:
            raise AssertionError("a malformed line was not refused")


values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 1 << 30),
                                st.text(max_size=5), st.floats(allow_nan=False)),
                      lambda inner: st.one_of(st.lists(inner, max_size=3),
                                              st.dictionaries(st.text(max_size=8), inner,
                                                              max_size=3)),
                      max_leaves=6)
keys = st.sampled_from(["tables", "dim", "max_pooling", "max_bags", "cache_ids",
                        "cache_timeout", "pmem", "link", "model", "blocks", "crc_folds",
                        "log_lines", "register_slices", "hdm_base", "nonsense"])


@PROPERTY
@given(st.dictionaries(keys, values, max_size=4))
def test_any_configuration_is_taken_or_refused_with_a_message(d):
    try:
        Config.from_dict(d)
    except ConfigError as e:
        assert str(e)


@PROPERTY
@given(st.data())
def test_pooling_equals_a_plain_sum_wrapped_to_32_bits(data):
    cfg = Config(tables=(5, 3), max_pooling=6, max_bags=16)
    rng_tables = [np.array(data.draw(st.lists(st.lists(st.integers(-2**31, 2**31 - 1),
                                                       min_size=cfg.dim, max_size=cfg.dim),
                                              min_size=rows, max_size=rows)), np.int64)
                  for rows in cfg.tables]
    n_bags = data.draw(st.integers(1, 8)) * cfg.n_tables
    bags = [data.draw(st.lists(st.integers(0, cfg.tables[k % cfg.n_tables] - 1),
                               max_size=cfg.max_pooling)) for k in range(n_bags)]
    indices = np.array([i for b in bags for i in b], np.uint32)
    offsets = np.array([0] + list(np.cumsum([len(b) for b in bags])), np.uint32)
    got = embedding_bag_sum(cfg, rng_tables, indices, offsets)
    for k, bag in enumerate(bags):
        exact = [sum(int(rng_tables[k % cfg.n_tables][i][e]) for i in bag) for e in range(cfg.dim)]
        wrapped = [((x + 2**31) % 2**32) - 2**31 for x in exact]
        assert list(got.pooled[k]) == wrapped
        assert got.overflow[k] == any(not -2**31 <= x < 2**31 for x in exact)

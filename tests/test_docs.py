"""The documentation builds with warnings as errors, and its register map follows the specification."""

import html
import re
from pathlib import Path

import pytest

from trainingcxl.spec.descriptors import ERROR_MEANINGS, OP_MEANINGS, ErrorCode, Op
from trainingcxl.spec.registers import REG, REGISTERS

sphinx_build = pytest.importorskip("sphinx.cmd.build")

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    doctrees = tmp_path_factory.mktemp("doctrees")
    status = sphinx_build.build_main(["-W", "--keep-going", "-b", "html", "-q", "-E",
                                      "-d", str(doctrees), str(DOCS), str(out)])
    return status, out


def _text(page):
    """The words of an HTML page, entities decoded and typographic quotes made plain."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", page)).replace("\u2019", "'")
    return re.sub(r"\s+", " ", text)


def test_the_site_builds_without_warnings(site):
    status, out = site
    assert status == 0
    for page in ("index", "design", "design-notes", "registers", "usage", "architecture",
                 "checkpointing", "relaxed-lookup", "ladder", "pmem", "pool", "boards", "verification",
                 "results", "api/spec", "api/hdl", "api/host"):
        assert (out / f"{page}.html").is_file(), page


def test_the_register_page_follows_the_specification(site):
    status, out = site
    assert status == 0
    text = _text((out / "registers.html").read_text(encoding="utf-8"))
    for r in REGISTERS:
        assert f" {r.name} " in text, r.name
    # an address and its register, in one row of the table
    assert re.search(rf"0x{REG.DESC_OP.addr:02X} DESC_OP RW control", text)
    # a field table for every register with more than one field
    for r in REGISTERS:
        if len(r.fields) > 1:
            for f in r.fields:
                assert f" {f.name} " in text, (r.name, f.name)
    for op in Op:
        assert f" {op.name} " in text and OP_MEANINGS[op].split(";")[0] in text, op
    for code in ErrorCode:
        assert f" {code.name} " in text and ERROR_MEANINGS[code] in text, code

"""Every JSON carries where it came from, and a ``train`` JSON reruns its run."""

import json

import pytest

from trainingcxl.host.cli import main

PROVENANCE = {"command_line", "argv", "seeds", "config_digest", "git", "versions", "host",
              "started", "ended", "simulator"}


def test_a_json_carries_the_provenance_record(tmp_path):
    from trainingcxl.host.cli import build_parser
    from trainingcxl.host.commands import report
    out = tmp_path / "out.json"
    args = build_parser().parse_args(["config", "tiny"])
    report.json_out(out, {"x": 1}, args=args)
    record = json.loads(out.read_text())
    assert PROVENANCE <= set(record["provenance"])
    assert set(record["provenance"]["git"]) == {"commit", "dirty"}
    assert {"trainingcxl", "amaranth", "cocotb", "verilator"} <= set(record["provenance"]["versions"])


@pytest.mark.cocotb
def test_train_reruns_from_its_json(tmp_path):
    """The JSON names the run (job, configuration, provenance); ``--from-json`` reruns
    it, power failures included, to the same losses and cycles."""
    first, again = tmp_path / "first.json", tmp_path / "again.json"
    assert main(["train", "--config", "tiny", "--batches", "3", "--seed", "5",
                 "--inject-failures", "1", "--quiet", "--json", str(first)]) == 0
    record = json.loads(first.read_text())
    prov = record["provenance"]
    assert PROVENANCE <= set(prov)
    assert prov["seeds"] == {"seed": 5, "failure_seed": 5}
    assert prov["argv"][:3] == ["train", "--config", "tiny"]
    assert prov["simulator"] == "verilator" and prov["git"]["commit"]
    assert record["job"]["seed"] == 5 and record["job"]["batches"] == 3
    assert main(["train", "--from-json", str(first), "--quiet", "--json", str(again)]) == 0
    rerun = json.loads(again.read_text())
    for key in ("loss", "loss_ref", "cycles", "cycles_per_batch", "failures", "job", "config"):
        assert rerun[key] == record[key], key
    assert rerun["provenance"]["argv"][:2] == ["train", "--from-json"]


def test_from_json_refuses_a_file_without_a_job(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"config": {}}')
    with pytest.raises(SystemExit, match="--from-json .*bad.json"):
        main(["train", "--from-json", str(bad)])
    with pytest.raises(SystemExit, match="drop --config"):
        main(["train", "--from-json", str(bad), "--config", "tiny"])

"""The command line: help texts and clear refusals of bad input."""

import subprocess
import sys

import pytest

from trainingcxl.host.cli import build_parser, main


@pytest.mark.parametrize("command", [[], ["lookup-demo"], ["bench-lookup"], ["config"], ["verilog"]])
def test_help_explains_every_command(command):
    out = subprocess.run([sys.executable, "-m", "trainingcxl.host.cli", *command, "--help"],
                         capture_output=True, text=True)
    assert out.returncode == 0
    assert "usage: trainingcxl" in out.stdout


def test_bad_config_is_refused_with_the_reason(capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["lookup-demo", "--config", "nonexistent-preset"])
    assert e.value.code == 2
    assert "neither a preset" in capsys.readouterr().err


def test_batch_too_large_for_the_configuration(tmp_path):
    out = tmp_path / "x.json"
    with pytest.raises(SystemExit, match="exceeds the configuration's max_bags"):
        main(["lookup-demo", "--config", "tiny", "--batch-size", "1000", "--json", str(out)])
    assert not out.exists()


def test_config_prints_json(capsys):
    assert main(["config", "tiny"]) == 0
    assert '"tables": [' in capsys.readouterr().out

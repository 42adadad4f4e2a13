"""The command line: help texts and clear refusals of bad input."""

import json
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


def test_train_refuses_a_bad_data_file_before_building(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("1\t2\n")
    with pytest.raises(SystemExit, match="bad.tsv:1: 2 columns"):
        main(["train", "--config", "tiny", "--data", str(bad)])
    with pytest.raises(SystemExit, match="No such file"):
        main(["train", "--config", "tiny", "--data", str(tmp_path / "missing.tsv")])


def test_train_refuses_test_sets_that_cannot_serve_before_building(tmp_path):
    from trainingcxl.host.model.criteo import write_sample
    data = write_sample(tmp_path / "data.tsv", lines=64, seed=1)
    with pytest.raises(SystemExit, match="for TSV data"):
        main(["train", "--config", "tiny", "--test-fraction", "0.2"])
    with pytest.raises(SystemExit, match="not both"):
        main(["train", "--config", "tiny", "--data", str(data), "--test", str(data),
              "--test-fraction", "0.2"])
    with pytest.raises(SystemExit, match="needs a test set"):
        main(["train", "--config", "tiny", "--data", str(data), "--eval-every", "2"])
    # A held-out file of one label only: no NaN AUC later, a message now.
    lines = data.read_text().splitlines(keepends=True)
    negatives = tmp_path / "negatives.tsv"
    negatives.write_text("".join("0" + l[1:] for l in lines))
    with pytest.raises(SystemExit, match="all negative: ROC AUC needs both labels"):
        main(["train", "--config", "tiny", "--data", str(data), "--test", str(negatives)])
    bad = tmp_path / "bad.tsv"
    bad.write_text(lines[0] + "1\t2\n")
    with pytest.raises(SystemExit, match="bad.tsv:2: 2 columns"):
        main(["train", "--config", "tiny", "--data", str(data), "--test", str(bad)])
    with pytest.raises(SystemExit, match="leaves 0 for the test set"):
        main(["train", "--config", "tiny", "--data", str(data), "--test-fraction", "0.001"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--test-fraction", "1.5"])


def test_make_criteo_sample(tmp_path, capsys):
    out = tmp_path / "s.tsv"
    assert main(["make-criteo-sample", str(out), "--lines", "10"]) == 0
    assert len(out.read_text().splitlines()) == 10
    assert all(len(l.split("\t")) == 40 for l in out.read_text().splitlines())


@pytest.mark.parametrize("command", [["train"], ["make-criteo-sample"], ["bench-update"],
                                     ["campaign"], ["sweep"]])
def test_help_of_training_commands(command):
    out = subprocess.run([sys.executable, "-m", "trainingcxl.host.cli", *command, "--help"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "usage: trainingcxl" in out.stdout


def test_failure_options_build_a_plan():
    from trainingcxl.host.tools.plans import failure_plan, parse_fail_in
    assert parse_fail_in("update@3+40") == {"phase": "update", "batch": 3, "offset": 40}
    assert parse_fail_in("recovery") == {"phase": "recovery"}
    plan = failure_plan(fail_at=[900, 500], fail_in=[parse_fail_in("recovery"),
                                                      parse_fail_in("gpu+7")], random=2)
    # A recovery failure strikes the recovery of the failure before it.
    assert plan == [{"at": 500}, {"phase": "recovery"}, {"at": 900}, {"phase": "gpu", "offset": 7},
                    {"random": True}, {"random": True}]


@pytest.mark.parametrize("bad, why", [(["--fail-in", "nap"], "unknown phase"),
                                      (["--fail-in", "update@x"], "PHASE"),
                                      (["--fail-at", "0"], "positive"),
                                      (["--staleness", "300"], "at most 255")])
def test_bad_failure_options_are_refused(bad, why, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["train", *bad])
    assert e.value.code == 2 and why in capsys.readouterr().err


def test_train_refuses_a_batch_the_undo_log_cannot_hold(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"tables": [32, 48], "max_bags": 256, "log_lines": 40}')
    with pytest.raises(SystemExit, match="undo log holds 5 groups"):
        main(["train", "--config", str(cfg), "--batch-size", "8"])


def test_the_undo_log_check_counts_distinct_rows():
    """Batches of many indices over few rows fit a ring their index count would not."""
    from types import SimpleNamespace

    import numpy as np

    from trainingcxl.spec.config import Config
    from trainingcxl.host.model.regions import check_checkpoint_regions, distinct_rows
    cfg = Config(tables=(32, 48), max_bags=256, log_lines=40)
    assert cfg.log_groups == 5
    offsets = np.arange(0, 8 * 2 * 8 + 1, 8, dtype=np.uint32)        # 16 bags of 8 indices
    few = SimpleNamespace(indices=np.array([0, 1] * 64, np.uint32), offsets=offsets)
    many = SimpleNamespace(indices=np.arange(128, dtype=np.uint32) % 32, offsets=offsets)
    assert distinct_rows(cfg, few) == 4 and distinct_rows(cfg, many) == 32
    with pytest.raises(ValueError, match="at worst"):
        check_checkpoint_regions(cfg, 8)
    check_checkpoint_regions(cfg, 8, [few] * 5)
    # 32 distinct rows take six groups, and one an UPDATE may close early.
    with pytest.raises(ValueError, match="need 9"):
        check_checkpoint_regions(cfg, 8, [few, many, few])
    with pytest.raises(ValueError, match="need 7"):
        check_checkpoint_regions(cfg, 8, [few, many, few], relaxed=False)


def test_relaxed_order_is_refused_without_the_relaxed_block(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"tables": [32, 48], "blocks": ["update", "checkpoint"]}')
    with pytest.raises(SystemExit, match="needs the relaxed block"):
        main(["train", "--config", str(cfg), "--system", "cxl", "--batches", "2"])
    with pytest.raises(SystemExit, match="leaves out the relaxed block"):
        main(["campaign", "--config", str(cfg), "--orders", "strict,relaxed"])


@pytest.mark.parametrize("command", [["train", "--system", "cxl-b", "--batches", "2"],
                                     ["campaign"], ["lookup-demo"], ["fuzz"]])
def test_device_top_commands_refuse_sdram_media(command):
    """The device top has no SDRAM: a run would wait forever for its first read. Each
    command that simulates it stops at once with one line."""
    with pytest.raises(SystemExit, match=r"--target sim-board\); on the device top, --set media=bram"):
        main([*command, "--config", "ulx3s"])


def test_train_refuses_snapshot_slots_smaller_than_the_mlps(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"tables": [32, 48], "max_bags": 256, "snapshot_lines": 5}')
    with pytest.raises(SystemExit, match="a snapshot slot holds 4 lines of parameters"):
        main(["train", "--config", str(cfg), "--batch-size", "8"])


def test_a_bad_run_leaves_a_reproducer(tmp_path, monkeypatch):
    from trainingcxl.host.commands import campaign as failures
    from trainingcxl.host.jobs import TrainJob
    from trainingcxl.host.runs.task import Task
    from trainingcxl.spec.config import Config
    from trainingcxl.spec.presets import PRESETS
    reruns = []

    class Rerun:
        def __call__(self, task):
            reruns.append(task)
    monkeypatch.setattr(failures, "DeviceRunner", Rerun)
    task = Task(4, PRESETS["tiny"], TrainJob(
        seed=9, batches=3, batch_size=4, staleness=1, relaxed=True, system="cxl-b",
        failures=({"random": True},), failure_seed=2))
    from trainingcxl.host.protocol.run_record import Failure
    from tests.tools.test_bench import train_record
    record = train_record(failures=[Failure(cycle=500, phase="update", batch=2, durable_before=1,
                                            recovery_failure_cycles=[620])])
    folder = failures._reproducer(tmp_path, task, record, "broken")
    repro = json.loads((folder / "repro.json").read_text())
    assert repro["fired_cycles"] == [500, 620]
    # The job itself replays the run (`train --from-json` reads it back whole).
    assert repro["command"] == f"trainingcxl train --from-json {folder / 'repro.json'}"
    assert TrainJob.from_dict(repro["job"]) == task.job
    assert Config.from_dict(repro["config"]) == PRESETS["tiny"]
    # The run is replayed with tracing on, its waveform kept beside the reproducer.
    assert reruns[0].waves_to == str(folder / "waves.vcd")


def test_the_simulated_board_runs_at_the_clock_it_is_named_for():
    """``train --target sim-board --clock-mhz`` simulates the build of that clock (its
    SDRAM timing in cycles); the oscillator's clock keeps the plain name."""
    from trainingcxl.sim.runner import _top, board_top
    from trainingcxl.spec.config import BOARD_CLOCK_MHZ
    from trainingcxl.spec.presets import PRESETS
    assert board_top() == board_top(BOARD_CLOCK_MHZ) == "board"
    assert _top(board_top(), PRESETS["ulx3s"]).clock_mhz == BOARD_CLOCK_MHZ
    assert _top(board_top(50), PRESETS["ulx3s"]).clock_mhz == 50
    with pytest.raises(ValueError, match="unknown simulation top"):
        _top("board-fastmhz", PRESETS["ulx3s"])
    with pytest.raises(SystemExit, match="--clock-mhz is for --target sim-board"):
        main(["train", "--target", "board", "--port", "/dev/null", "--clock-mhz", "50"])


@pytest.mark.parametrize("command", [["train", "--config", "tiny"], ["campaign", "--config", "tiny"],
                                     ["study"], ["bench", "--pool"]])
def test_a_pool_too_large_is_refused_in_one_line(command):
    """A configuration error the command finds (here the pool's size) is its reason in one
    line, before anything is built."""
    with pytest.raises(SystemExit) as e:
        main([*command, "--devices", "1000"])
    assert str(e.value) == "error: pool.devices must be an integer in [1, 64], not 1000"


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_batch_beyond_max_bags_is_refused_before_building(command, tmp_path):
    """The job's own checks run before a device is built: one line, at once."""
    with pytest.raises(SystemExit) as e:
        main([command, "--config", "tiny", "--set", "max_bags=6", "--batch-size", "5",
              "--json", str(tmp_path / "x.json")])
    assert str(e.value) == ("error: --batch-size 5 x 2 tables exceeds the configuration's "
                            "max_bags (6)")
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("args, why", [
    (["--pls", "-1"], "--pls and --fraction set CPR's partial recovery"),
    (["--fraction", "0.5"], "--pls and --fraction set CPR's partial recovery"),
    (["--devices", "2", "--recovery", "cpr"], "--recovery cpr needs --failure-every N"),
])
def test_options_that_do_not_apply_are_refused(args, why, tmp_path):
    """An option the run would not use is refused in one line, not ignored."""
    with pytest.raises(SystemExit) as e:
        main(["train", "--config", "tiny", *args, "--json", str(tmp_path / "x.json")])
    assert str(e.value).startswith(f"error: {why}") and "\n" not in str(e.value)


@pytest.mark.parametrize("command", [["train", "--config", "tiny"], ["study"]])
def test_a_share_of_rows_has_one_range_everywhere(command, capsys):
    for bad in ("0", "1.5"):
        with pytest.raises(SystemExit):
            main([*command, "--fraction", bad])
        assert "must lie in (0, 1]" in capsys.readouterr().err

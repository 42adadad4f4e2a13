"""Output paths are checked before anything is built or simulated: a path that
cannot be written ends the command at once, with one line that says why."""

import subprocess
import sys
import time

import pytest


def run_cli(*argv):
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "trainingcxl.host.cli", *argv],
                          capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - t0


@pytest.mark.parametrize("option, name", [("--json", "run.json"), ("--plot", "loss.png"),
                                          ("--export", "model"), ("--dump", "dump")])
def test_an_unwritable_output_fails_at_once_with_one_line(tmp_path, option, name):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    # A configuration no test builds: reaching the build would take minutes.
    done, seconds = run_cli("train", "--config", "tiny", "--set", "max_pooling=7",
                            "--batches", "2", option, str(blocker / name))
    assert done.returncode != 0
    assert seconds < 5, f"took {seconds:.1f} s: the path was checked too late"
    assert "[build]" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {option} ") and "a-file" in lines[0]


def test_an_output_that_is_a_folder_is_refused(tmp_path):
    done, _ = run_cli("config", "tiny", "--json", str(tmp_path))
    assert done.returncode != 0 or "is a folder" in done.stderr


def test_an_existing_read_only_file_is_refused(tmp_path):
    from trainingcxl.host.tools.outputs import check_file, OutputError
    with pytest.raises(OutputError, match="is a folder"):
        check_file(tmp_path)
    check_file(tmp_path / "new" / "out.json")
    assert (tmp_path / "new").is_dir()


def test_results_survive_a_failed_write(tmp_path, capsys, monkeypatch):
    """A write that fails after the run (the disk filled, the folder went) keeps the
    results in a file beside the temporary folder and says where."""
    from trainingcxl.host.commands import report
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    gone = tmp_path / "gone"
    gone.write_text("")
    assert not report.json_out(gone / "x.json", {"loss": [1.0]})
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "kept in" in err
    kept = err.rsplit("kept in ", 1)[1].strip()
    assert "loss" in open(kept).read()

"""The PMEM media as a file (``train --pmem``): its header, a killed host recovered, and
the durable state read from Python (docs/pmem.md, "The media as a file")."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from trainingcxl.spec.presets import PRESETS
from trainingcxl.host import pmem
from trainingcxl.host.pmem.media_file import (MAGIC, MEDIA_AT, VERSION, MediaFile, MediaFileError,
                                              create)

RUN = {"seed": 0, "data": "synthetic", "batch_size": 16, "min_pooling": 0, "zipf_alpha": 1.05,
       "system": "cxl-b", "staleness": 0, "relaxed": False, "checkpointing": True}


def test_a_new_file_has_its_header_and_blank_media(tmp_path):
    cfg = PRESETS["tiny"]
    media = create(tmp_path / "m.pmem", cfg, RUN)
    assert media.config.digest() == cfg.digest() and media.run == RUN
    assert (tmp_path / "m.pmem").stat().st_size == MEDIA_AT + cfg.media_lines * 64
    assert not media.lines().any() and media.recoveries() == []
    state = pmem.open(tmp_path / "m.pmem")
    assert not state.found and state.durable is None
    media.record_recovery(4, 3)
    media.record_recovery(6, 6)
    assert MediaFile(tmp_path / "m.pmem").recoveries() == [(4, 3), (6, 6)]


def test_bad_files_are_refused_in_one_line(tmp_path):
    cfg = PRESETS["tiny"]
    path = tmp_path / "m.pmem"
    create(path, cfg, RUN)
    with pytest.raises(MediaFileError, match="exists .* --resume .* --overwrite"):
        create(path, cfg, RUN)
    create(path, cfg, RUN, overwrite=True)
    with pytest.raises(MediaFileError, match="another configuration .* differs in max_bags"):
        pmem.open(path, config=cfg.replace(max_bags=cfg.max_bags * 2))
    assert not pmem.open(path, config=cfg).found
    (tmp_path / "short.pmem").write_bytes(path.read_bytes()[:MEDIA_AT + 100])
    (tmp_path / "text.pmem").write_text("hello\n")
    # A file of the format before the energy-backed buffer (version 1).
    old = bytearray(path.read_bytes())
    old[len(MAGIC):len(MAGIC) + 4] = (VERSION - 1).to_bytes(4, "little")
    (tmp_path / "old.pmem").write_bytes(old)
    for name, why in (("short.pmem", "truncated"), ("text.pmem", "not a trainingcxl media"),
                      ("absent.pmem", "no such media file"),
                      ("old.pmem", f"format version {VERSION - 1}; this trainingcxl reads "
                                   f"version {VERSION}")):
        with pytest.raises(MediaFileError, match=why) as e:
            pmem.open(tmp_path / name)
        assert "\n" not in str(e.value)


def test_overwrite_replaces_only_a_media_file(tmp_path):
    """``--overwrite`` never clobbers what is not a media file: a user's file, a directory,
    a link to either stay as they were, refused in one line."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(notes)
    for name in ("notes.txt", "dir", "link"):
        for overwrite in (False, True):
            with pytest.raises(MediaFileError, match="not a trainingcxl media file: refusing"):
                create(tmp_path / name, PRESETS["tiny"], RUN, overwrite=overwrite)
    assert notes.read_text() == "my notes\n" and (tmp_path / "link").is_symlink()


# -- real processes, killed --------------------------------------------------------------

def _train(*args):
    return [sys.executable, "-m", "trainingcxl.host.cli", "train", "--config", "tiny", *args]


def _run(args, **kw):
    done = subprocess.run(args, capture_output=True, text=True, **kw)
    return done.returncode, done.stdout + done.stderr


def _killed(args, after_lines, delay):
    """Start ``args`` in a process group of its own and kill the whole group with SIGKILL
    ``delay`` seconds after its ``after_lines``-th line of progress."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    seen = 0
    for line in proc.stdout:
        seen += line.lstrip().startswith("batch ")
        if seen >= after_lines:
            break
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return proc.returncode


@pytest.mark.slow
@pytest.mark.cocotb
@pytest.mark.parametrize("system, staleness", [("cxl-b", 0), ("cxl", 1)])
def test_a_killed_host_resumes_from_the_media_file(tmp_path, system, staleness):
    """SIGKILL of the whole training process at random moments (twice from outside,
    once by the simulator itself during the recovery of a power failure), each time
    resumed from the media file: with K = 0 the run ends bit-identical to one never
    killed (tables and losses); with K = 1 in relaxed order every resume is checked
    against the golden model replayed along the recoveries the file's journal holds."""
    batches = 30
    common = ["--system", system, "--staleness", str(staleness), "--batches", str(batches),
              "--quiet", "--check-every", "1"]
    whole, killed = tmp_path / "whole.pmem", tmp_path / "killed.pmem"
    code, out = _run(_train(*common, "--pmem", str(whole), "--json", str(tmp_path / "w.json")))
    assert code == 0, out
    rng = random.Random(7)
    loud = [a for a in common if a != "--quiet"]
    # 1: killed from outside while it trains.
    assert _killed(_train(*loud, "--pmem", str(killed)), 3, rng.uniform(0, 0.5)) == -9
    assert pmem.open(killed).durable < batches
    # 2: resumed, a power failure in an update, and the host killed during its recovery.
    code, out = _run(_train("--pmem", str(killed), "--resume", "--batches", str(batches),
                            "--fail-in", "update", "--kill-in", "recovery"))
    assert code != 0 and "--resume" in out, out
    # 3: resumed, killed from outside again.
    _killed(_train("--pmem", str(killed), "--resume", "--batches", str(batches), "--check-every",
                   "1"), 1, rng.uniform(0, 0.5))
    assert pmem.open(killed).durable < batches
    code, out = _run(_train("--pmem", str(killed), "--resume", "--batches", str(batches),
                            "--json", str(tmp_path / "k.json")))
    assert code == 0, out
    rec = json.loads((tmp_path / "k.json").read_text())
    assert rec["golden_match"] and rec["resumed"]["consistent"]
    assert len(MediaFile(killed).recoveries()) >= 2     # the failure's and each resume's
    a, b = pmem.open(whole), pmem.open(killed)
    assert a.durable == b.durable == batches
    if staleness == 0:
        assert all(np.array_equal(x, y) for x, y in zip(a.tables, b.tables))
        assert np.array_equal(a.mlp_params.view(np.uint32), b.mlp_params.view(np.uint32))
        ref = json.loads((tmp_path / "w.json").read_text())
        assert rec["loss"] == ref["loss"][-len(rec["loss"]):]


@pytest.mark.slow
@pytest.mark.cocotb
def test_the_python_api_reads_a_file_killed_mid_update(tmp_path):
    """Killed in an update, the file's durable state, recovered in software, is the golden
    model's at the batch before; reading it leaves the file as it was."""
    path = tmp_path / "m.pmem"
    code, out = _run(_train("--system", "cxl-b", "--staleness", "0", "--batches", "6",
                            "--pmem", str(path), "--kill-in", "update@4+40",
                            "--dump", str(tmp_path / "never")))
    assert code != 0, out
    before = path.read_bytes()
    state = pmem.open(path)
    assert state.found and state.durable == 3 and state.snapshot_batch == 3
    assert state.rolled_back > 0                # batch 4's update had begun
    from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
    from trainingcxl.host.model.dlrm import FixedPointTrainer
    cfg = PRESETS["tiny"]
    golden = FixedPointTrainer(cfg, initial_tables(cfg, seed=0), seed=0)
    data = SyntheticWorkload(cfg, seed=0, batch_size=16)
    for i in range(3):
        golden.step(data.batch(i))
    assert all(np.array_equal(x, y) for x, y in zip(state.tables, golden.tables))
    assert np.array_equal(state.mlp_params.view(np.uint32),
                          golden.dense.parameters().view(np.uint32))
    assert path.read_bytes() == before
    npz = state.export(tmp_path / "model")
    assert npz.exists()


@pytest.mark.slow
@pytest.mark.cocotb
@pytest.mark.parametrize("signum, group", [(signal.SIGINT, False), (signal.SIGTERM, True)])
def test_a_graceful_stop_resumes_bit_identical_to_a_run_never_stopped(tmp_path, signum, group):
    """SIGINT or SIGTERM, to the training process alone (what a supervisor or ``timeout``
    sends) or to its whole group (Ctrl-C): the run ends after the batch in progress,
    committed, checked and durable with a snapshot of that batch's MLPs, writes its JSON
    marked interrupted, prints no traceback, names the command that resumes it and exits
    128 + the signal; at K = 1 the resumed run ends bit-identical to a run never stopped
    (tables, MLPs and losses)."""
    path, out = tmp_path / "m.pmem", tmp_path / "run.json"
    common = ["--staleness", "1", "--check-every", "1"]
    proc = subprocess.Popen(_train(*common, "--batches", "400", "--pmem", str(path),
                                   "--json", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.lstrip().startswith("batch 3/"):
            (os.killpg if group else os.kill)(proc.pid, signum)
            break
    lines += proc.stdout.readlines()
    text = "".join(lines)
    assert proc.wait() == 128 + signum, text
    assert "Traceback" not in text and "--resume --batches 400" in text
    rec = json.loads(out.read_text())
    stopped = rec["stopped_after"]
    assert rec["interrupted"] and rec["golden_match"] and 3 <= stopped < 400
    state = pmem.open(path)
    assert state.durable == state.snapshot_batch == stopped
    end = stopped + 3
    code, again = _run(_train("--pmem", str(path), "--resume", "--batches", str(end),
                              "--json", str(tmp_path / "resumed.json")))
    assert code == 0 and "bit-exact" in again, again
    whole = tmp_path / "whole.pmem"
    code, ref = _run(_train(*common, "--batches", str(end), "--pmem", str(whole), "--json",
                            str(tmp_path / "whole.json")))
    assert code == 0, ref
    a, b = pmem.open(whole), pmem.open(path)
    assert a.durable == b.durable == end
    assert all(np.array_equal(x, y) for x, y in zip(a.tables, b.tables))
    assert np.array_equal(a.mlp_params.view(np.uint32), b.mlp_params.view(np.uint32))
    resumed = json.loads((tmp_path / "resumed.json").read_text())["loss"]
    assert resumed == json.loads((tmp_path / "whole.json").read_text())["loss"][-len(resumed):]


@pytest.mark.slow
@pytest.mark.cocotb
def test_a_kill_campaign_tallies_kills_resumes_and_lost_batches(tmp_path):
    from trainingcxl.host.cli import main
    out = tmp_path / "kills.json"
    assert main(["campaign", "--kill", "4", "--per-run", "2", "--staleness", "0,1",
                 "--orders", "strict", "--jobs", "2", "--journal", str(tmp_path / "j"),
                 "--json", str(out)]) == 0
    s = json.loads(out.read_text())
    assert s["kills"] + sum(not r["killed"] for t in s["tasks"] for r in t["rounds"]) == 4
    assert s["inconsistent"] == s["lost_durable"] == s["recover_differs_from_software"] == 0
    assert s["final_bit_exact"] == s["media_files"] == 2
    assert all(t["final_resumed"] is None or t["final_resumed"]["consistent"] for t in s["tasks"])


@pytest.mark.slow
@pytest.mark.cocotb
def test_a_campaign_keeps_each_runs_media_in_a_file_of_its_own(tmp_path):
    """``--pmem-dir``: every run's media outlive it, its recoveries journaled; the Python
    API reads the durable state each run ended at."""
    from trainingcxl.host.cli import main
    out = tmp_path / "c.json"
    assert main(["campaign", "--failures", "4", "--per-run", "2", "--batches", "3",
                 "--staleness", "0,1", "--orders", "strict", "--jobs", "2",
                 "--pmem-dir", str(tmp_path / "media"), "--json", str(out)]) == 0
    runs = json.loads(out.read_text())["run_details"]
    for r in runs:
        state = pmem.open(tmp_path / "media" / f"{r['index']}.pmem")
        assert state.found and state.durable >= 3 - r["staleness"]
        assert len(state.recoveries) == r["failures"] == 2
        assert state.run["staleness"] == r["staleness"]


def test_a_file_in_use_by_another_run_is_refused(tmp_path, capsys):
    """A second run on a media file (or one that would --overwrite it) is refused while the
    first holds it; the lock goes with the first process."""
    import fcntl
    from trainingcxl.host.cli import main
    path = tmp_path / "m.pmem"
    create(path, PRESETS["tiny"], RUN)
    with open(path, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for argv in (["--resume"], ["--overwrite", "--config", "tiny"]):
            with pytest.raises(SystemExit, match="in use by another run"):
                main(["train", "--pmem", str(path), *argv])
    assert MediaFile(path).run == RUN                   # untouched

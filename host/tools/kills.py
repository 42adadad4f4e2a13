"""Crash campaigns of real processes (``campaign --kill``): ``train --pmem`` started,
killed with SIGKILL at a random wall-clock moment, resumed, again and again.

A task (:func:`run_kills`) owns one media file. Each round starts the training
process (a new run, then ``--resume``), lets it run for a random time and kills
its whole process group. Whatever moment that was (starting up, training,
recovering, replaying the golden model), the next round's process runs
``RECOVER`` on the file and checks the invariants against the golden model
replayed to the durable batch; its ``resumed:`` line says what it found. After
each kill the file is also recovered in software (:func:`trainingcxl.host.pmem.open`):
the durable batch must never fall, and the device's ``RECOVER`` must find the
same one. A last round trains two more batches to the end, unkilled, bit-exact.
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

__all__ = ["run_kills", "kill_specs", "KILL_WINDOW_S"]

#: A process is killed this many seconds after it starts, drawn uniformly: from the
#: middle of its start-up to well into its training.
KILL_WINDOW_S = (0.5, 6.0)
#: Batches a killed run is asked for: more than it reaches before a kill (a job's batches
#: are all checked against the undo log's size before it starts, so not many more).
_MANY = 1000
_RESUMED = re.compile(r"resumed: RECOVER found D=(\d+) m=(\d+) .* (consistent|INCONSISTENT)")


def kill_specs(base, *, kills, per_run, staleness, orders, seed):
    """The tasks of a ``campaign --kill``: ``ceil(kills / per_run)`` media files, each
    killed ``per_run`` times, cycling over the staleness bounds and lookup orders."""
    cfg = base.replace(relaxed_lookup=False)
    specs = []
    for i in range(max(1, -(-kills // per_run))):
        k = staleness[i % len(staleness)]
        relaxed = orders[(i // len(staleness)) % len(orders)] == "relaxed"
        specs.append({"index": i, "config": cfg.to_dict(), "kills": min(per_run, kills - i * per_run),
                      "seed": seed * 1000 + i, "staleness": k, "relaxed": relaxed,
                      "system": "cxl-b" if not relaxed else "cxl"})
    return specs


def _train(spec, folder, *extra):
    return [sys.executable, "-m", "trainingcxl.host.cli", "train",
            "--config", str(folder / "config.json"), "--seed", str(spec["seed"]),
            "--system", spec["system"], "--staleness", str(spec["staleness"]),
            "--pmem", str(folder / "media.pmem"), "--quiet", "--check-every", "1000",
            "--test-samples", "0", *extra]


def _run_for(cmd, seconds):
    """Run ``cmd`` in a process group of its own for ``seconds`` (or until it ends), then
    kill the group with SIGKILL; returns ``(output, killed)``."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        proc.wait(timeout=seconds)
        killed = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed = True
    reader.join(timeout=5)
    return "".join(lines), killed


def run_kills(spec):
    """One task of a kill campaign (see the module docstring); returns ``(spec, record,
    error)`` like :func:`~.pool.run_train`."""
    from trainingcxl.host import pmem
    rng = random.Random(spec["seed"])
    rounds, error = [], None
    with tempfile.TemporaryDirectory(prefix="trainingcxl-kill-") as tmp:
        folder = Path(tmp)
        (folder / "config.json").write_text(json.dumps(spec["config"]))
        media = folder / "media.pmem"
        relaxed = ["--relaxed"] if spec["relaxed"] else []
        durable = 0
        for k in range(spec["kills"]):
            started = media.exists()
            cmd = _train(spec, folder, "--batches", str(_MANY),
                         *(["--resume"] if started else relaxed))
            delay = rng.uniform(*KILL_WINDOW_S)
            out, killed = _run_for(cmd, delay)
            found = _RESUMED.search(out)
            state = pmem.open(media) if media.exists() else None
            after = state.durable if state is not None and state.found else 0
            entry = {"round": k, "after_s": round(delay, 3), "killed": killed,
                     "resumed": None, "durable_after": after, "lost": after < durable}
            if found:
                entry["resumed"] = {"d": int(found[1]), "m": int(found[2]),
                                    "consistent": found[3] == "consistent",
                                    # RECOVER on the device found what a software recovery
                                    # of the file found after the kill before.
                                    "as_before": int(found[1]) == durable}
            elif not killed and error is None:
                error = out[-2000:]     # it ended by itself, before a kill: it failed
            rounds.append(entry)
            durable = max(durable, after)
        # The last round is not killed: two more batches, bit-exact to the end.
        final = folder / "final.json"
        done = subprocess.run(_train(spec, folder, "--batches", str(durable + 2),
                                     *(["--resume"] if media.exists() else relaxed),
                                     "--json", str(final)),
                              capture_output=True, text=True)
        record = json.loads(final.read_text()) if final.exists() else {}
        if done.returncode != 0 and error is None:
            error = (done.stdout + done.stderr)[-2000:]
    return spec, {"rounds": rounds, "final_golden_match": bool(record.get("golden_match")),
                  "final_resumed": record.get("resumed"), "durable": durable}, error

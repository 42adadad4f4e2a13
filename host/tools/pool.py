"""Training jobs in parallel processes, with a progress bar: what campaigns, sweeps and
the benchmark fan out."""

import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

__all__ = ["run_train", "Progress", "parallel_runs", "prebuild"]


def run_train(spec):
    """One training job in its own process; returns ``(spec, record or None, error text)``."""
    from trainingcxl.spec.config import Config
    from trainingcxl.sim.runner import BenchFailure, run_bench
    cfg = Config.from_dict(spec["config"])
    with tempfile.TemporaryDirectory(prefix="trainingcxl-run-") as tmp:
        out = Path(tmp) / "run.json"
        args = {**spec["args"], "out": str(out), "quiet": True}
        error = None
        # The simulator's own output goes to a log, kept for the error message.
        log_path = Path(tmp) / "run.log"
        saved = os.dup(1), os.dup(2)
        with open(log_path, "w") as log_file:
            os.dup2(log_file.fileno(), 1)
            os.dup2(log_file.fileno(), 2)
            try:
                run_bench(spec.get("sim", "verilator"), cfg, "trainingcxl.sim.jobs.job_train",
                          args=args, quiet=True, results_name=f"run{spec['index']}",
                          work_dir=tmp, waves=spec.get("waves", False), log=lambda text: None)
            except BenchFailure as e:
                error = str(e)[-500:]
            finally:
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
        if error:
            error += "\n" + log_path.read_text(errors="replace")[-3000:]
        record = json.loads(out.read_text()) if out.exists() else None
        if spec.get("waves") and spec.get("waves_to"):
            from trainingcxl.sim.runner import waves_file
            src = waves_file(spec.get("sim", "verilator"), cfg, work_dir=tmp)
            if src.exists():
                Path(spec["waves_to"]).parent.mkdir(parents=True, exist_ok=True)
                Path(spec["waves_to"]).write_bytes(src.read_bytes())
    return spec, record, error


class Progress:
    """A progress bar on stderr (a line per tenth when stderr is not a terminal)."""

    def __init__(self, total, what):
        self.total, self.what, self.done, self.t0 = total, what, 0, time.monotonic()

    def step(self, note=""):
        self.done += 1
        width = 30
        filled = width * self.done // max(1, self.total)
        rate = self.done / max(1e-9, time.monotonic() - self.t0)
        eta = (self.total - self.done) / rate if rate else 0
        text = (f"  [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {self.what}"
                f"{note}, ETA {eta:4.0f} s ")
        if sys.stderr.isatty():
            print("\r" + text, end="", file=sys.stderr, flush=True)
            if self.done == self.total:
                print(file=sys.stderr)
        elif self.done == self.total or self.done % max(1, self.total // 10) == 0:
            print(text, file=sys.stderr, flush=True)     # a log file gets a line per tenth


def parallel_runs(specs, jobs, progress_note):
    """Run ``specs`` on ``jobs`` processes; yields ``(spec, record, error)`` as they finish."""
    bar = Progress(len(specs), "runs")
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_train, s) for s in specs]
        for fut in as_completed(futures):
            result = fut.result()
            bar.step(progress_note(result))
            yield result


def _build(sim, config_dict):
    from trainingcxl.spec.config import Config
    from trainingcxl.sim.runner import build
    build(sim, Config.from_dict(config_dict), log=lambda text: print(text, file=sys.stderr, flush=True))


def prebuild(configs, sim="verilator", jobs=1):
    """Build each distinct device (by hardware digest) once, before the parallel runs share
    the builds; ``jobs`` builds at a time."""
    distinct = list({cfg.hardware_digest(): cfg for cfg in configs}.values())
    if jobs <= 1 or len(distinct) <= 1:
        for cfg in distinct:
            _build(sim, cfg.to_dict())
        return
    with ProcessPoolExecutor(max_workers=min(jobs, len(distinct))) as pool:
        for fut in [pool.submit(_build, sim, cfg.to_dict()) for cfg in distinct]:
            fut.result()

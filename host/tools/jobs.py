"""Running a cocotb job of ``trainingcxl.sim.jobs`` and collecting its JSON record."""

import json
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["run_job"]


def run_job(sim, config, job_args, *, job="lookup", waves=None, partial=False):
    """Run ``trainingcxl.sim.jobs.job_<job>`` on ``sim`` and return its JSON record.

    ``waves``: where to copy a waveform of the run. ``partial``: a job that
    failed after writing its record (a golden mismatch) still returns it;
    otherwise, and when no record was written, ``BenchFailure`` propagates.
    """
    from trainingcxl.sim.runner import BenchFailure, run_bench, waves_file
    with tempfile.TemporaryDirectory(prefix="trainingcxl-job-") as tmp:
        out = Path(tmp) / "job.json"
        try:
            run_bench(sim, config, f"trainingcxl.sim.jobs.job_{job}", args={**job_args, "out": str(out)},
                      quiet=True, results_name=f"{job}-{sim}", waves=waves is not None,
                      log=lambda text: print(text, file=sys.stderr, flush=True))
        except BenchFailure:
            if not (partial and out.exists()):
                raise
        record = json.loads(out.read_text())
    if waves is not None:
        shutil.copyfile(waves_file(sim, config), waves)
        record["waves"] = str(waves)
    return record

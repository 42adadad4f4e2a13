"""What a cocotb bench learns from the runner that started it (:func:`.runner.run_bench`)."""

import json
import os

from trainingcxl.spec.config import NOMINAL_CLOCK_MHZ, Config
from .runner import ARGS_ENV, CONFIG_ENV

__all__ = ["PERIOD_NS", "bench_config", "bench_args"]

#: The device clock's period in the simulations: 4 ns.
PERIOD_NS = 1000 // NOMINAL_CLOCK_MHZ


def bench_config():
    """The configuration the runner built the device with."""
    return Config.from_json(os.environ[CONFIG_ENV])


def bench_args():
    """The bench's arguments (a JSON object) given to :func:`.runner.run_bench`."""
    return json.loads(os.environ.get(ARGS_ENV, "{}"))

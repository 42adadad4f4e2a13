"""What a cocotb bench learns from the runner that started it (:func:`.runner.run_bench`)."""

import json
import os

from trainingcxl.spec.config import Config
from .rtl.clock import PERIOD_NS
from .runner import ARGS_ENV, CONFIG_ENV

__all__ = ["PERIOD_NS", "bench_config", "bench_args"]



def bench_config():
    """The configuration the runner built the device with."""
    return Config.from_json(os.environ[CONFIG_ENV])


def bench_args():
    """The bench's arguments (a JSON object) given to :func:`.runner.run_bench`."""
    return json.loads(os.environ.get(ARGS_ENV, "{}"))

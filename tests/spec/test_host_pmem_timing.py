"""The media every system reaches, and the host-pmem baseline's CPU: the media profiles
give the device's PMEM timing, host-pmem's loads and stores cost what that same
timing says, and its CPU kernels cost what the microbenchmark measured."""

import math

import pytest

from trainingcxl.spec.config import (MEDIA_PROFILES, NOMINAL_CLOCK_MHZ, Config, ConfigError,
                                     HostPmemTiming, PmemTiming)
from trainingcxl.spec.presets import PRESETS

BASE = HostPmemTiming()


def test_the_default_media_is_the_papers_emulation_and_optane_is_one_module():
    assert Config().media_profile == "emulated"
    assert (PmemTiming().read_latency, PmemTiming().write_latency) == (60, 140)     # 240, 560 ns
    assert (PmemTiming().read_rate, PmemTiming().write_rate) == ((3, 5), (1, 10))   # 9.6, 1.6 GB/s
    optane = Config().with_media("optane")
    assert optane.media_profile == "optane"
    assert optane.pmem.read_latency == round(305 * NOMINAL_CLOCK_MHZ / 1000)
    # 6.6 and 2.3 GB/s in 64-byte lines per 4 ns cycle, exactly.
    assert optane.pmem.read_rate == (33, 80) and optane.pmem.write_rate == (23, 160)
    # The media are hardware: another profile is another build.
    assert optane.hardware_digest() != Config().hardware_digest()
    assert Config().with_overrides(["pmem.read_latency=61"]).media_profile == "custom"
    with pytest.raises(ConfigError, match="unknown media profile 'dram'"):
        Config().with_media("dram")
    assert set(MEDIA_PROFILES) >= {"emulated", "optane"}


def test_host_pmem_reaches_the_media_the_device_reaches():
    """A group of loads: the first line's latency, then the lines at the read rate; a
    fenced group of stores: the lines at the write rate, then the last one's latency."""
    for cfg in (Config(), Config().with_media("optane")):
        p = cfg.pmem
        assert BASE.read_cycles(p, 1000) == p.read_latency + math.ceil(1000 * p.read_rate[1]
                                                                       / p.read_rate[0])
        assert BASE.write_cycles(p, 1000) == math.ceil(1000 * p.write_rate[1]
                                                       / p.write_rate[0]) + p.write_latency
        assert BASE.read_cycles(p, 0) == BASE.write_cycles(p, 0) == 0


@pytest.mark.parametrize("field,value,way", [
    ("dedup_ns", 11.4, "more"), ("pool_ns", 0.94, "more"), ("scatter_ns", 5.2, "more"),
    ("apply_ns", 0.24, "more"), ("cores", 40, "less"),
])
def test_each_cpu_figure_moves_the_cost_its_way(field, value, way):
    work = {"dedup": 400_000, "pool": 6_400_000, "scatter": 6_400_000, "apply": 1_600_000}
    a = BASE.cpu_cycles(**work)
    b = HostPmemTiming(**{**BASE.__dict__, field: value}).cpu_cycles(**work)
    assert {"more": b > a, "less": b < a}[way], (field, a, b)
    assert BASE.cpu_cycles() == 0


def test_overrides_change_one_field_and_refuse_what_is_not_a_field():
    cfg = PRESETS["tiny"].with_overrides(["host_pmem.cores=6", "host_pmem.pool_ns=1"])
    assert cfg.host_pmem.cores == 6 and cfg.host_pmem.pool_ns == 1
    # Host-side only: the same device, the same build.
    assert cfg.hardware_digest() == PRESETS["tiny"].hardware_digest()
    for bad, why in (("host_pmem.speed=3", "no field 'speed' in host_pmem"),
                     ("host_pmem.cores=0", "cores must be an integer in"),
                     ("host_pmem.dedup_ns=-1", "must be a non-negative number"),
                     ("tables.x=1", "'tables' is not a group"),
                     ("load_ns", "expected FIELD=VALUE")):
        with pytest.raises(ConfigError, match=why):
            PRESETS["tiny"].with_overrides([bad])

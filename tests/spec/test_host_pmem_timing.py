"""The host-pmem baseline's costs: each cited constant moves the cost the way it should,
and a configuration changes them field by field (``--set``)."""

import pytest

from trainingcxl.spec.config import ConfigError, HostPmemTiming
from trainingcxl.spec.presets import PRESETS

BASE = HostPmemTiming()


def test_defaults_are_the_cited_measurements():
    # [YANG20] Fig. 2 and [IZR19]: one Optane DC module.
    assert (BASE.load_ns, BASE.read_gbps, BASE.write_gbps, BASE.persist_ns, BASE.modules) == \
        (305.0, 6.6, 2.3, 62.3, 1)
    # A load group: its first line's latency, then 64 bytes a line at 6.6 GB/s (4 ns cycles).
    assert BASE.read_cycles(1000) == -(-(305 + 64_000 / 6.6) // 4)
    assert BASE.write_cycles(1000) == -(-(64_000 / 2.3 + 62.3) // 4)
    assert BASE.read_cycles(0) == BASE.write_cycles(0) == 0


@pytest.mark.parametrize("field,value,reads,writes", [
    ("load_ns", 610.0, "more", "same"),
    ("read_gbps", 13.2, "less", "same"),
    ("write_gbps", 4.6, "same", "less"),
    ("persist_ns", 124.6, "same", "more"),
    ("modules", 6, "less", "less"),
])
def test_each_constant_moves_the_cost_its_way(field, value, reads, writes):
    changed = HostPmemTiming(**{**BASE.__dict__, field: value})
    for cost, way in ((lambda t: t.read_cycles(500), reads), (lambda t: t.write_cycles(500), writes)):
        a, b = cost(BASE), cost(changed)
        assert {"more": b > a, "less": b < a, "same": b == a}[way], (field, a, b)


def test_overrides_change_one_field_and_refuse_what_is_not_a_field():
    cfg = PRESETS["tiny"].with_overrides(["host_pmem.load_ns=400", "host_pmem.modules=6"])
    assert cfg.host_pmem.load_ns == 400 and cfg.host_pmem.modules == 6
    # Host-side only: the same device, the same build.
    assert cfg.hardware_digest() == PRESETS["tiny"].hardware_digest()
    for bad, why in (("host_pmem.speed=3", "no field 'speed' in host_pmem"),
                     ("host_pmem.modules=0", "modules must be an integer in"),
                     ("host_pmem.load_ns=-1", "must be a positive number"),
                     ("tables.x=1", "'tables' is not a group"),
                     ("load_ns", "expected FIELD=VALUE")):
        with pytest.raises(ConfigError, match=why):
            PRESETS["tiny"].with_overrides([bad])

"""The energy model: linear terms, input checks, the flit arithmetic, documented defaults."""

import dataclasses

import pytest

from trainingcxl.host.model import energy as energy_module
from trainingcxl.host.model.energy import (
    DEFAULT_ENERGY, Activity, EnergyBreakdown, EnergyModel, link_bytes,
)

ZERO = dict(cycles=0, gpu_busy_cycles=0, pmem_lines_read=0, pmem_lines_written=0,
            link_bytes=0, engine_line_ops=0, host_line_ops=0, host_cpu_cycles=0)
DYNAMIC = ("pmem_read", "pmem_write", "link", "engines", "host_ops")

# (activity field, breakdown field, joules per unit count under DEFAULT_ENERGY)
M = DEFAULT_ENERGY
PERIOD = 1e-6 / M.clock_mhz
PER_COUNT = [
    ("pmem_lines_read", "pmem_read", M.pmem_read_nj_per_line * 1e-9),
    ("pmem_lines_written", "pmem_write", M.pmem_write_nj_per_line * 1e-9),
    ("link_bytes", "link", 8 * M.link_pj_per_bit * 1e-12),
    ("engine_line_ops", "engines", M.engine_pj_per_line_op * 1e-12),
    ("host_line_ops", "host_ops", M.host_pj_per_line_op * 1e-12),
    # Above idle only: the idle power is charged for every cycle of the run.
    ("host_cpu_cycles", "host_cpu", (M.host_cpu_w - M.host_cpu_idle_w) * PERIOD),
]


def activity(**kw):
    return Activity(**{**ZERO, **kw})


@pytest.mark.parametrize("count,term,unit", PER_COUNT, ids=[p[0] for p in PER_COUNT])
def test_each_dynamic_term_is_linear_in_its_count_alone(count, term, unit):
    for n in (1, 7, 1000, 10**9):
        e = M.energy(activity(**{count: n}))
        assert getattr(e, term) == pytest.approx(n * unit, rel=1e-12)
        others = [f.name for f in dataclasses.fields(e) if f.name != term]
        assert all(getattr(e, f) == 0 for f in others), (count, others)
    one = getattr(M.energy(activity(**{count: 1})), term)
    assert getattr(M.energy(activity(**{count: 12345})), term) == pytest.approx(12345 * one)


def test_time_terms_are_linear_in_cycles():
    e = M.energy(activity(cycles=1000, gpu_busy_cycles=300))
    assert e.gpu_busy == pytest.approx(300 * PERIOD * M.gpu_busy_w)
    assert e.gpu_idle == pytest.approx(700 * PERIOD * M.gpu_idle_w)
    assert e.device_static == pytest.approx(1000 * PERIOD * M.device_static_w)
    assert e.host_cpu_idle == pytest.approx(1000 * PERIOD * M.host_cpu_idle_w)
    e2 = M.energy(activity(cycles=2000, gpu_busy_cycles=600))
    for name in ("gpu_busy", "gpu_idle", "device_static", "host_cpu_idle"):
        assert getattr(e2, name) == pytest.approx(2 * getattr(e, name))


def test_one_second_at_the_nominal_clock():
    cycles = 250_000_000                         # 1 s at 250 MHz
    e = M.energy(activity(cycles=cycles, gpu_busy_cycles=cycles // 4))
    assert e.gpu_busy == pytest.approx(0.25 * M.gpu_busy_w)
    assert e.gpu_idle == pytest.approx(0.75 * M.gpu_idle_w)
    assert e.device_static == pytest.approx(M.device_static_w)
    assert e.host_cpu_idle == pytest.approx(M.host_cpu_idle_w)


def test_the_host_cpu_idles_in_every_system_and_draws_tdp_while_it_works():
    """One second: idle throughout, a CPU that idles draws its idle power; one that works
    a quarter of the second draws TDP then and idle power the rest."""
    cycles = 250_000_000
    idle = M.energy(activity(cycles=cycles))
    assert idle.host_cpu == 0 and idle.host_cpu_idle == pytest.approx(M.host_cpu_idle_w)
    busy = M.energy(activity(cycles=cycles, host_cpu_cycles=cycles // 4))
    assert busy.host_cpu + busy.host_cpu_idle == pytest.approx(
        0.25 * M.host_cpu_w + 0.75 * M.host_cpu_idle_w)
    always = M.energy(activity(cycles=cycles, host_cpu_cycles=cycles))
    assert always.host_cpu + always.host_cpu_idle == pytest.approx(M.host_cpu_w)


def test_an_idle_power_above_the_working_one_is_refused():
    with pytest.raises(ValueError, match=r"energy\.host_cpu_idle_w = 130.0 exceeds energy\.host_cpu_w = 125.0"):
        dataclasses.replace(M, host_cpu_idle_w=130.0)


def test_gpu_idle_uses_cycles_minus_busy():
    all_busy = M.energy(activity(cycles=500, gpu_busy_cycles=500))
    assert all_busy.gpu_idle == 0
    assert all_busy.gpu_busy == pytest.approx(500 * PERIOD * M.gpu_busy_w)
    all_idle = M.energy(activity(cycles=500))
    assert all_idle.gpu_busy == 0
    assert all_idle.gpu_idle == pytest.approx(500 * PERIOD * M.gpu_idle_w)


def test_zero_activity_costs_nothing_and_no_dynamic_energy_without_counts():
    e = M.energy(activity())
    assert e.total == 0 and all(v == 0 for v in e.as_dict().values())
    idle = M.energy(activity(cycles=10**6, gpu_busy_cycles=10**5))
    assert all(getattr(idle, name) == 0 for name in DYNAMIC)
    assert idle.total > 0


def test_as_dict_holds_every_field_and_the_total_is_their_sum():
    e = M.energy(activity(cycles=10**7, gpu_busy_cycles=4 * 10**6, pmem_lines_read=123_456,
                          pmem_lines_written=54_321, link_bytes=9_999_999,
                          engine_line_ops=77_777, host_line_ops=66_666,
                          host_cpu_cycles=55_555))
    d = e.as_dict()
    names = [f.name for f in dataclasses.fields(EnergyBreakdown)]
    assert list(d) == names + ["total"]
    assert all(d[n] > 0 for n in names)
    assert d["total"] == pytest.approx(sum(d[n] for n in names), rel=1e-15)
    assert d["total"] == e.total


def test_clock_converts_cycles_to_seconds():
    slow = dataclasses.replace(M, clock_mhz=125.0)
    a = activity(cycles=1000, gpu_busy_cycles=1000)
    assert slow.energy(a).gpu_busy == pytest.approx(2 * M.energy(a).gpu_busy)
    reads = activity(pmem_lines_read=5)
    assert slow.energy(reads).pmem_read == M.energy(reads).pmem_read


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(Activity)])
def test_negative_count_is_refused_naming_the_field(field):
    kw = {**ZERO, "cycles": 10}
    kw[field] = -1
    with pytest.raises(ValueError, match=rf"activity\.{field}\b"):
        Activity(**kw)


@pytest.mark.parametrize("bad", [1.5, "3", None, True])
def test_non_integer_count_is_refused_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"activity\.pmem_lines_read"):
        activity(pmem_lines_read=bad)


def test_busy_beyond_the_run_is_refused():
    with pytest.raises(ValueError, match=r"activity\.gpu_busy_cycles = 11 exceeds activity\.cycles = 10"):
        activity(cycles=10, gpu_busy_cycles=11)


def test_numpy_integers_are_accepted_as_counts():
    np = pytest.importorskip("numpy")
    a = activity(cycles=np.int64(10), pmem_lines_read=np.uint32(3))
    assert type(a.cycles) is int and type(a.pmem_lines_read) is int
    assert M.energy(a).pmem_read == M.energy(activity(cycles=10, pmem_lines_read=3)).pmem_read


@pytest.mark.parametrize("field,bad", [("link_pj_per_bit", -1.0), ("gpu_idle_w", float("nan")),
                                       ("clock_mhz", 0.0), ("device_static_w", "22")])
def test_bad_constants_are_refused_naming_the_field(field, bad):
    with pytest.raises(ValueError, match=rf"energy\.{field}\b"):
        dataclasses.replace(M, **{field: bad})


def test_energy_wants_an_activity():
    with pytest.raises(TypeError):
        M.energy(ZERO)


@pytest.mark.parametrize("data,other,expected", [
    (0, 0, 0),
    (1, 0, 68),          # a data line fills the four slots of one 68-byte flit
    (0, 1, 17),          # a header-only message is one slot and its quarter of the overhead
    (0, 4, 68),          # four headers fill one flit
    (1, 1, 85),          # a read response: a data header and its line
    (1000, 2000, 1000 * 68 + 2000 * 17),
])
def test_link_bytes_counts_slots_of_68_byte_flits(data, other, expected):
    assert link_bytes(data, other) == expected


@pytest.mark.parametrize("args,name", [((-1, 0), "data_messages"), ((0, -2), "other_messages"),
                                       ((0.5, 0), "data_messages")])
def test_link_bytes_refuses_bad_counts(args, name):
    with pytest.raises(ValueError, match=name):
        link_bytes(*args)


def test_defaults_are_positive_and_match_their_derivations():
    for f in dataclasses.fields(EnergyModel):
        assert getattr(M, f.name) > 0, f.name
    assert M.pmem_read_nj_per_line == pytest.approx(2.47 * 512 / 1000)
    assert M.pmem_write_nj_per_line == pytest.approx(16.82 * 512 / 1000)
    assert M.engine_pj_per_line_op == pytest.approx(163.2)
    assert M.host_pj_per_line_op == pytest.approx(3995.2)
    assert (M.gpu_busy_w, M.gpu_idle_w, M.device_static_w, M.clock_mhz) == (300, 50, 22, 250)
    assert (M.host_cpu_w, M.host_cpu_idle_w) == (125, 30)
    assert M.pmem_write_nj_per_line > M.pmem_read_nj_per_line
    assert M.host_pj_per_line_op > M.engine_pj_per_line_op
    assert M.gpu_busy_w > M.gpu_idle_w


@pytest.mark.parametrize("klass", [EnergyModel, Activity, EnergyBreakdown])
def test_every_field_is_documented(klass):
    for f in dataclasses.fields(klass):
        assert f"``{f.name}``" in klass.__doc__, f"{klass.__name__}.{f.name} undocumented"


def test_every_constant_is_in_the_module_table():
    doc = energy_module.__doc__
    for f in dataclasses.fields(EnergyModel):
        assert f.name in doc, f.name
    for key in ("[LEE09]", "[HOR14]", "[OCO17]", "[V100]", "[OPT19]", "[XEON19]", "Left out"):
        assert key in doc, key

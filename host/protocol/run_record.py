"""What a training run returns, as typed records: :class:`TrainRecord` and its parts.

A record is a dataclass, each field declared once; :meth:`Record.to_dict` gives the
JSON the applications write and the commands keep, :meth:`Record.from_dict` reads it
back (``from_dict(to_dict(r)) == r``, through JSON too). The JSON is the same as when
the records were dicts: a field declared with :func:`optional` is left out while it is
``None`` (the key was absent) and written as ``null`` when it is :data:`NULL` (the key
was there, with no value); every other field is written, ``None`` as ``null``. Maps
keyed by counter or invariant names stay dicts.
"""

import dataclasses
import types
import typing
from dataclasses import dataclass, field

__all__ = ["Record", "optional", "NULL", "Check", "RunError", "Failure", "CprFailure", "Resumed",
           "Window", "Evaluation", "TestSetInfo", "CprStats", "PoolInfo", "TrainRecord"]


class _Null:
    """The value of an optional field whose key is there with no value."""
    __slots__ = ()

    def __bool__(self):
        return False

    def __repr__(self):
        return "NULL"

    def __reduce__(self):           # one object, through pickling too
        return "NULL"


#: An optional field written as ``null`` (see the module docstring).
NULL = _Null()


def optional(default=None):
    """A field whose key the JSON leaves out while it is ``None``."""
    return field(default=default, metadata={"optional": True})


class Record:
    """Base of the typed records: JSON serialisation by the fields' types."""

    def to_dict(self):
        """The record as JSON data, in the shape the applications have always written."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata.get("optional"):
                continue
            out[f.name] = None if value is NULL else _dump(value)
        return out

    @classmethod
    def from_dict(cls, d):
        """The record ``d`` (JSON data, as :meth:`to_dict` gives) holds; a key no field
        declares is a :exc:`ValueError`."""
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(d) - set(fields)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields: {', '.join(sorted(unknown))}")
        return cls(**{k: NULL if v is None and fields[k].metadata.get("optional")
                      else _load(hints[k], v) for k, v in d.items()})

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


def _dump(value):
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def _load(hint, value):
    """``value`` (JSON data) as the type ``hint`` declares: records, lists of them, maps
    keyed by int (JSON keys are strings)."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _load(inner[0], value) if len(inner) == 1 else value
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_dict(value)
    if origin is list:
        return [_load(args[0], v) for v in value] if args else list(value)
    if origin is dict and args:
        key = int if args[0] is int else (lambda k: k)
        return {key(k): _load(args[1], v) for k, v in value.items()}
    return value


@dataclass
class Check(Record):
    """The tables read back after a batch (``batch``: the data batch, one less than the
    device's) and compared with the golden model's."""
    batch: int
    tables_match: bool


@dataclass
class RunError(Record):
    """A descriptor that did not complete as the protocol expected (the error codes'
    names), or on a pool a disagreement between the devices (``loss``, ``failures``)."""
    batch: int = optional()
    lookup: str = optional()
    update: str = optional()
    commit: str = optional()
    committed: int = optional()
    device: int = optional()
    loss: str = optional()
    failures: str = optional()


@dataclass
class Failure(Record):
    """One power failure and the recovery from it: where it struck, what ``RECOVER``
    found, the invariants checked. On a pool's device also the pool's recovery
    (``power_failed`` false: another device failed and this one halted); in a pool's
    merged record, every device's figures of it (``devices_failed``, ``..._per_device``)."""
    cycle: int
    phase: str
    batch: int
    durable_before: int
    recovered_batch: int = None
    recovered_mlp_batch: int = None
    recovery_cycles: int = None
    recovery_lines: int = None
    rolled_back: int = None
    failures_during_recovery: int = 0
    recovery_failure_cycles: list = field(default_factory=list)
    invariants: dict = field(default_factory=dict)
    consistent: bool = None
    snapshot_in_flight: bool = optional()
    cause: str = optional()
    # a pool's
    power_failed: bool = optional()
    pool_recovery_cycles: int = optional()
    pool_durable_before: int = optional()
    snapshot_from: int = optional()
    halts_during_recovery: int = optional()
    devices_failed: list = optional()
    recovery_cycles_per_device: list = optional()
    rolled_back_per_device: list = optional()


@dataclass
class CprFailure(Record):
    """One device's failure under CPR's partial recovery, after ``batch``: the failed
    device's reload (``reload_cycles``, ``lines_written``, ``consistent``: its tables
    equal the golden model's after it), and how long the pool stood still."""
    batch: int
    device: int
    batches_since_checkpoint: int
    cycle: int = optional()
    reload_cycles: int = optional()
    lines_written: int = optional()
    consistent: bool = optional()
    pool_recovery_cycles: int = None


@dataclass
class Resumed(Record):
    """A run resumed on media an earlier process left: what ``RECOVER`` found there."""
    recovered_batch: int
    recovered_mlp_batch: int
    recovery_cycles: int
    recovery_lines: int
    rolled_back: int
    earlier_recoveries: int
    invariants: dict
    consistent: bool


@dataclass
class Window(Record):
    """The measured window: counters and modelled host figures from ``first_batch`` to
    ``last_batch``."""
    first_batch: int
    last_batch: int
    batches: int
    cycles: int
    counters: dict
    host: dict


@dataclass
class Evaluation(Record):
    """Held-out metrics after ``batch``: the device-trained model's and the float32
    reference's (:class:`~trainingcxl.host.model.evaluate.Metrics` as dicts)."""
    batch: int
    device: dict
    reference: dict


@dataclass
class TestSetInfo(Record):
    """The held-out test set a run evaluated on."""
    __test__ = False            # not a pytest class
    name: str
    samples: int
    positives: int


@dataclass
class CprStats(Record):
    """CPR's checkpoints and reloads on a device (on a pool: the devices' summed, the
    cycles the slowest device's)."""
    interval: int
    every: int
    checkpoints: int = 0
    rows_read: int = 0
    lines_read: int = 0
    read_cycles: int = 0
    lines_written: int = 0
    reload_cycles: int = 0


@dataclass
class PoolInfo(Record):
    """How a pool's run ran: its devices and simulators, the tables by device, the
    recovery points chosen (:func:`~.pool.recovery_point`'s dicts)."""
    devices: int
    workers: int
    where: str
    switch_latency: int
    tables: list
    pieces: list
    recoveries: list
    wall_s: float


@dataclass
class TrainRecord(Record):
    """What a training run returns (``train_app``, a board's run, a pool's merged run).

    ``loss``, ``loss_ref`` and ``cycles_per_batch`` are keyed by the device's batch
    number (the surviving attempt of each); the JSON holds them as lists in batch
    order, from batch 1 or the batch after the one a resumed run recovered, except in
    the record of a run that stopped part-way (``aborted``), which keeps them keyed by
    batch as the run left them, and a board's ``cycles_per_batch`` (its runs have no
    clock), keyed too."""
    batches: int
    system: str
    staleness: int
    relaxed: bool
    checkpointing: bool
    gpu_cycles_per_batch: int
    loss: dict[int, float] = field(default_factory=dict)
    loss_ref: dict[int, float] = field(default_factory=dict)
    cycles_per_batch: dict[int, int] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    errors: list[RunError] = field(default_factory=list)
    pooled_mismatches: int = 0
    fallbacks: int = 0
    failures: list[Failure] = field(default_factory=list)
    # CPR's partial recovery (a pool's ``--recovery cpr*``)
    recovery: str = optional()
    cpr_failures: list[CprFailure] = optional()
    cpr: CprStats = optional()
    # how the run ended
    stopped_after: int = optional()
    interrupted: bool = optional()
    aborted: str = optional()
    resumed: Resumed = optional()
    failures_planned_left: int = optional()
    cycles: int = optional()
    test_set: TestSetInfo = optional()
    eval: list[Evaluation] = optional()
    host: dict = optional()
    window: Window = optional()
    consistent: bool = optional()
    # the application's
    final_loss: float = optional()
    final_loss_ref: float = optional()
    counters: dict = optional()
    golden_match: bool = optional()
    wall_s: float = optional()
    skipped_lines: int = optional()
    waves: str = optional()
    # a board's
    bridge: dict = optional()
    frames: int = optional()
    uart_framing_errors: int = optional()
    sdram_violation: str = optional()
    target: str = optional()
    board: str = optional()
    clock_mhz: float = optional()
    # the command's
    sim: str = optional()
    config: dict = optional()
    data: str = optional()
    job: dict = optional()
    # a pool's: how it ran, and each device's record (with its tables and their rows)
    pool: PoolInfo = optional()
    devices: list["TrainRecord"] = optional()
    device: int = optional()
    tables: list = optional()
    ranges: list = optional()
    # what ``--json`` adds (:func:`~trainingcxl.host.commands.report.json_out`)
    provenance: dict = optional()

    #: The per-batch maps, lists in the JSON of a finished run.
    PER_BATCH: typing.ClassVar[tuple] = ("loss", "loss_ref", "cycles_per_batch")

    @property
    def first_batch(self):
        """The first batch the run trained (the one after a resumed run's D)."""
        return 1 if self.resumed is None else self.resumed.recovered_batch + 1

    def losses(self, key="loss"):
        """A per-batch map as a list in batch order."""
        values = getattr(self, key)
        return [values[b] for b in sorted(values)]

    def to_dict(self):
        out = super().to_dict()
        for key in self.PER_BATCH:
            keyed = self.aborted is not None or (key == "cycles_per_batch"
                                                 and self.bridge is not None)
            if not keyed:
                out[key] = self.losses(key)
        return out

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        lists = {k: d.pop(k) for k in cls.PER_BATCH if isinstance(d.get(k), list)}
        rec = super().from_dict(d)
        for key, values in lists.items():
            setattr(rec, key, dict(enumerate(values, rec.first_batch)))
        return rec

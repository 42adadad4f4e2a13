"""What the applications other than training return, as typed records (see
:mod:`trainingcxl.host.protocol.run_record`, whose :class:`TrainRecord` the training and
board applications return), and which record each application writes."""

from dataclasses import dataclass, field

from trainingcxl.host.protocol.run_record import Record, TrainRecord, optional

__all__ = ["LookupBatch", "LookupRecord", "UpdateBatch", "UpdateRecord", "NotRefused",
           "FuzzRecord", "RECORDS", "record_class"]


@dataclass
class LookupBatch(Record):
    """One ``LOOKUP`` batch against the golden model."""
    batch: int
    bags: int
    indices: int
    cycles: int
    busy_cycles: int
    pmem_lines: int
    lines_per_cycle: float
    overflow_bags: int
    error: str
    golden_match: bool


@dataclass
class LookupRecord(Record):
    """``lookup_app``: the batches, the PMEM read rate the engine reached while busy
    against the model's peak, and the simulation's speed."""
    config: dict
    job: dict
    load_cycles: int
    batches: list[LookupBatch]
    counters: dict
    lookup_wall_s: float
    lookup_sim_cycles: int
    sim_cycles_per_s: float
    job_wall_s: float
    total_cycles: int
    total_cycles_per_s: float
    golden_match: bool
    pmem_lines: int
    busy_cycles: int
    peak_lines_per_cycle: float
    lines_per_cycle: float
    waves: str = optional()


@dataclass
class UpdateBatch(Record):
    """One ``UPDATE`` batch against the PMEM bound."""
    batch: int
    error: str
    lines: int
    forwarded: int
    busy_cycles: int
    cycles: int
    bound_cycles: float
    efficiency: float


@dataclass
class UpdateRecord(Record):
    """``update_app``: the batches and the engine's share of the PMEM bound."""
    batches: list[UpdateBatch]
    lines: int
    bound_cycles: float
    busy_cycles: int
    update_efficiency: float
    golden_match: bool
    waves: str = optional()


@dataclass
class NotRefused(Record):
    """An invalid input the device did not refuse (``shard``: in a merged record)."""
    case: int
    kind: str
    shard: int = optional()


@dataclass
class FuzzRecord(Record):
    """``fuzz_app``: invalid inputs sent and refused, and what went wrong around them;
    ``fuzz``'s record of its shards merged (:func:`~trainingcxl.host.commands.fuzz.merge_shards`)
    adds the shards' hangs and errors and how it ran."""
    cases: int = 0
    invalid: int = 0
    refused: int = 0
    not_refused: list[NotRefused] = field(default_factory=list)
    corruptions: int = 0
    hangs: int = 0
    lost_commits: int = 0
    batches: int = 0
    by_kind: dict = field(default_factory=dict)
    hang: str = optional()
    counters: dict = optional()
    waves: str = optional()
    # the merged record's
    hang_notes: list = optional()
    errors: list = optional()
    sim: str = optional()
    seed: int = optional()
    shards: int = optional()
    shard_cases: int = optional()
    execution: dict = optional()


#: The record each application writes, by application module.
RECORDS = {"train_app": TrainRecord, "board_app": TrainRecord, "lookup_app": LookupRecord,
           "update_app": UpdateRecord, "fuzz_app": FuzzRecord}


def record_class(job):
    """The record class of ``job``'s application."""
    return RECORDS[job.app]

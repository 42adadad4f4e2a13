"""Jobs: what a command asks the layers below it to do, declared once.

A job is a frozen record with its defaults and the help text of each field.
The command line builds one from its options (:meth:`Job.add_arguments` takes
the help and the default from the declaration, :meth:`Job.from_args` reads them
back), validates it once against the configuration it runs on, and hands it
down; it crosses into a simulator process as JSON (:meth:`Job.to_dict`,
:meth:`Job.from_dict`, as :class:`~trainingcxl.spec.config.Config` does) and the
application there (:mod:`trainingcxl.host.apps`) reads the same record back.
Argparse namespaces stop at the command line.
"""

import dataclasses
import json
from dataclasses import dataclass, field
from typing import ClassVar

from trainingcxl.host.model.data import ZIPF_ALPHA
from trainingcxl.host.model.partial import (CPR_FRACTION, CPR_PLS, CPR_VARIANTS,
                                             check_cpr_settings)
from trainingcxl.host.protocol.systems import CAMPAIGN_SYSTEM, DEFAULT_SYSTEM, staleness_defaults
from trainingcxl.host.protocol.run_record import TrainRecord

__all__ = ["JobError", "Job", "TrainJob", "LookupJob", "UpdateJob", "FuzzJob", "BoardJob",
           "DEFAULT_SYSTEM", "CAMPAIGN_SYSTEM"]



class JobError(ValueError):
    """A job the configuration or the target cannot run; the message says why."""


def option(default, help, *, default_text=None, flag=None):
    """A job field: its default and what it means (the command line's help).
    ``default_text`` names a default that is decided later (``None`` fields);
    ``flag``: the option takes no value and sets the field true (by default, for
    fields whose default is a bool)."""
    return field(default=default, metadata={"help": help, "default_text": default_text,
                                            "flag": isinstance(default, bool) if flag is None
                                            else flag})


@dataclass(frozen=True)
class Job:
    """Base of the job records: serialisation and the command-line options."""
    #: The application that runs the job inside a simulator (a module of
    #: :mod:`trainingcxl.host.apps`).
    app: ClassVar[str] = ""

    def to_dict(self):
        """The job as JSON data (tuples as lists), as it crosses into a simulator."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def to_json(self):
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d):
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise JobError(f"unknown {cls.__name__} fields: {', '.join(sorted(unknown))}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    @classmethod
    def help(cls, name, default=dataclasses.MISSING, text=None):
        """The help text of field ``name`` (or ``text``, a command's own words for it)
        with its default (or ``default``) named."""
        f = cls._field(name)
        value = f.default if default is dataclasses.MISSING else default
        said = f.metadata.get("default_text") if value is None else None
        if said is None and not f.metadata["flag"]:
            said = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value
        return (text or f.metadata["help"]) + (f" (default: {said})" if said is not None else "")

    @classmethod
    def add_arguments(cls, parser, *names, defaults=None, **kwargs):
        """Add ``--name`` options for the fields ``names``; ``defaults`` overrides a
        field's default for this command, ``kwargs`` (by field name) add argparse
        keywords such as ``type`` or ``choices``, and ``help``: the command's own words
        for the field."""
        defaults = defaults or {}
        for name in names:
            f = cls._field(name)
            default = defaults.get(name, f.default)
            extra = dict(kwargs.get(name, {}))
            text = extra.pop("help", None)
            if f.metadata["flag"]:
                extra.setdefault("action", "store_true")
            parser.add_argument("--" + name.replace("_", "-"), dest=name, default=default,
                                help=cls.help(name, default, text), **extra)

    @classmethod
    def from_args(cls, args, **changes):
        """The job the command line asked for: every field the namespace carries,
        then ``changes``."""
        given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
                 if hasattr(args, f.name)}
        return cls(**{**given, **changes})

    @classmethod
    def _field(cls, name):
        for f in dataclasses.fields(cls):
            if f.name == name:
                return f
        raise KeyError(f"{cls.__name__} has no field {name!r}")


@dataclass(frozen=True)
class TrainJob(Job):
    """DLRM training on the device against the golden model (``trainingcxl train``,
    and every run of a campaign, sweep, benchmark or study)."""
    app: ClassVar[str] = "train_app"
    seed: int = option(0, "workload and table seed")
    batches: int = option(50, "batches to run")
    batch_size: int = option(None, "samples per batch; each sample has one bag per table",
                             default_text="the configuration's model.batch_size")
    data: str = option("synthetic", "'synthetic' (Zipf rows, a learnable signal) or a "
                       "Criteo-format TSV file")
    on_bad_lines: str = option("raise", "malformed TSV lines: stop with the line number, or "
                               "skip and count them")
    test: str = option(None, "with TSV data: a Criteo-format file of held-out samples to "
                       "evaluate on")
    test_fraction: float = option(None, "with TSV data: hold out the last F of the file's "
                                  "samples (the Criteo convention: the test set is the end of "
                                  "the file) and train on the rest")
    test_samples: int = option(4096, "with synthetic data: evaluate on N samples of another "
                               "seeded stream (0: no evaluation)")
    eval_every: int = option(0, "evaluate on the test set every N batches as well as after "
                             "the last (0: after the last only): log loss, ROC AUC and accuracy "
                             "of the device-trained model (tables read back) and of the float32 "
                             "reference")
    system: str = option(DEFAULT_SYSTEM, "the rung of the evaluation ladder to train on")
    relaxed: bool = option(None, "relaxed order: look up batch n+1 while the GPU computes "
                           "batch n, before batch n's update, and finish it afterwards "
                           "(bit-identical results; default: the system's, or the "
                           "configuration's relaxed_lookup)", flag=True)
    staleness: int = option(None, "staleness bound K: training stalls while the newest MLP "
                            "snapshot is more than K batches behind the newest commit (0: "
                            "strict, snapshot every batch)",
                            default_text=f"the system's: {staleness_defaults()}")
    checkpointing: bool = option(True, "undo log, commits and MLP snapshots")
    check_every: int = option(10, "read the tables back and compare them every N batches (and "
                              "at the first and last)")
    failures: tuple = option((), "the power failure plan (entries of "
                             "trainingcxl.host.protocol.timed.FailurePlan)")
    failure_seed: int = option(None, "seed of the random failure cycles",
                               default_text="the workload seed")
    until_plan_done: bool = option(False, "stop once every planned failure has happened")
    extend: bool = option(False, "train past the batches, up to 4x, until every planned "
                          "failure has happened")
    measure_from: int = option(None, "first batch of the measured window (counter deltas)")
    min_pooling: int = option(0, "smallest bag of the synthetic data (rows per bag): at the "
                              "configuration's max_pooling every bag is full, and small tables "
                              "repeat rows within and across bags")
    zipf_alpha: float = option(ZIPF_ALPHA, "Zipf exponent of synthetic rows' popularity")
    dump: str = option(None, "write final tables, MLP parameters and the batches used as .npz "
                       "files into DIR")
    export: str = option(None, "write the device-trained model into DIR: model.npz, float32 "
                         "arrays named as a PyTorch DLRM's state dict (embeddings.T.weight, "
                         "bottom_mlp.I.weight, ...), and model.json with its shapes "
                         "(docs/usage.md, \"Exporting a model\")")
    quiet: bool = option(False, "no line per batch (power failures and the summary still print)")
    log_every: int = option(1, "a progress line every N batches (and the last); power "
                            "failures always print")
    pmem: str = option(None, "keep the PMEM media in FILE, memory-mapped by the simulator "
                       "(Verilator): what leaves the write-pending queue is in the file at "
                       "once, and the file outlives the process; a new FILE is made, an "
                       "existing one needs --resume or --overwrite (docs/pmem.md)")
    resume: bool = option(False, "with --pmem: continue the run FILE holds: RECOVER, the "
                          "golden model replayed to the durable batch and checked, then on "
                          "to --batches (the configuration and the run's seed, data, system, "
                          "K and order are FILE's)")
    overwrite: bool = option(False, "with --pmem: start a new run in FILE's place")
    recovery: str = option("exact", "how a pool of devices recovers from a device's failure: "
                           "'exact' (TrainingCXL: every device rolls back to the pool's "
                           "durable batch, bit-exact) or CPR's partial recovery, 'cpr', "
                           "'cpr-mfu' or 'cpr-ssu' (no checkpoint engine; the host reads "
                           "periodic checkpoints of the tables, a failed device's tables are "
                           "reloaded from them and the others go on; strict order; "
                           "docs/pool.md)")
    failure_every: int = option(0, "with --recovery cpr*: a failure of one device between "
                                "batches every N batches on average (0: none)")
    pls: float = option(CPR_PLS, "with --recovery cpr*: CPR's target portion of lost samples, "
                        "which with --failure-every sets the checkpoint interval")
    fraction: float = option(CPR_FRACTION, "with --recovery cpr-mfu or cpr-ssu: the share of "
                             "each table's rows a checkpoint saves, taken that share of the "
                             "interval apart")
    pool_member: dict = option(None, "set by a pool's coordinator, not on the command line: "
                               "the device of the pool this run is (docs/pool.md)")
    resume_report: str = option(None, "set by a kill campaign, not on the command line: with "
                                "--resume, write what RECOVER found (the record's 'resumed') "
                                "to this file as soon as it is checked")
    #: What the application returns (:mod:`trainingcxl.host.protocol.run_record`).
    record_class: ClassVar[type] = TrainRecord

    def resolved(self, config):
        """This job with what it left to the configuration and the system decided:
        the batch size, the staleness bound, the lookup order, the failure seed."""
        from trainingcxl.host.protocol.systems import SYSTEMS
        if self.system not in SYSTEMS:
            raise JobError(f"unknown system {self.system!r}; the systems are {', '.join(SYSTEMS)}")
        system = SYSTEMS[self.system]
        return self.replace(
            batch_size=config.model.batch_size if self.batch_size is None else self.batch_size,
            staleness=system.staleness if self.staleness is None else self.staleness,
            # CPR's failures come between batches: no lookup may run ahead of one.
            relaxed=bool(system.engines and (
                (system.relaxed or config.relaxed_lookup) and self.recovery == "exact"
                if self.relaxed is None else self.relaxed)),
            checkpointing=self.checkpointing and self.recovery == "exact",
            failure_seed=self.seed if self.failure_seed is None else self.failure_seed)

    def cpr_settings(self):
        """What :class:`~trainingcxl.host.protocol.training.TrainingRun` takes for CPR's
        recovery (``None`` for exact recovery)."""
        if self.recovery == "exact":
            return None
        return {"variant": self.recovery, "failure_every": self.failure_every,
                "pls": self.pls, "fraction": self.fraction}

    def _check_recovery(self, config):
        if self.recovery not in ("exact", *CPR_VARIANTS):
            raise JobError(f"unknown recovery {self.recovery!r}; the recoveries are exact, "
                           f"{', '.join(CPR_VARIANTS)}")
        if self.recovery == "exact":
            if self.failure_every:
                raise JobError("--failure-every plans CPR's failures; exact recovery's are "
                               "planned with --inject-failures")
            if (self.pls, self.fraction) != (CPR_PLS, CPR_FRACTION):
                raise JobError("--pls and --fraction set CPR's partial recovery: they go with "
                               "--recovery cpr, cpr-mfu or cpr-ssu")
            return
        if config.pool.devices < 2:
            raise JobError(f"--recovery {self.recovery} is a pool's: a failed device reloads "
                           f"its tables while the others go on (set --devices N, N >= 2)")
        if self.relaxed:
            raise JobError(f"--recovery {self.recovery} trains in strict order: its failures "
                           f"come between batches (drop --relaxed)")
        if self.failures:
            raise JobError(f"--recovery {self.recovery} plans its failures with "
                           f"--failure-every, between batches")
        try:
            check_cpr_settings(self.pls, self.fraction)
        except ValueError as e:
            raise JobError(str(e)) from None
        if self.failure_every < 1:
            raise JobError(f"--recovery {self.recovery} needs --failure-every N (N >= 1): the "
                           f"mean batches between failures of one device")

    def validated(self, config, *, sim="verilator", note=lambda text: None):
        """This job resolved (:meth:`resolved`) and checked against ``config`` and the
        simulator, before anything is built: the data and test files are read, the
        batches must fit the descriptors and the undo log. :class:`JobError` says what
        does not fit; ``note`` is told what is worth knowing (lines skipped, no test set)."""
        from pathlib import Path
        from trainingcxl.host.model.regions import check_checkpoint_regions
        from trainingcxl.host.protocol.systems import SYSTEMS
        job = self.resolved(config)
        system = SYSTEMS[job.system]
        job._check_recovery(config)
        check_bags(config, job.batch_size)
        job, data = job._with_data(config, note)
        if system.host_bus and sim != "verilator":
            raise JobError("--system host-pmem reaches the media through Verilator's backdoor; "
                           "use --sim verilator")
        if any(e.get("phase") == "log" for e in job.failures) and not system.log_pass:
            raise JobError(f"system {system.name} has no 'log' phase (only near-data and cxl-d "
                           f"log in a pass of their own)")
        if not job.checkpointing and job.failures:
            raise JobError("power failures need checkpointing; drop --no-checkpoint or the "
                           "failure options")
        if job.relaxed and "relaxed" not in config.blocks:
            why = f"system {system.name}" + (", --relaxed" if self.relaxed else "")
            raise JobError(f"relaxed order ({why}) needs the relaxed block, which this "
                           f"configuration leaves out (blocks: {', '.join(config.blocks) or 'none'}); "
                           f"use a strict-order system such as cxl-b")
        if (job.resume or job.overwrite) and not job.pmem:
            raise JobError("--resume and --overwrite go with --pmem FILE")
        if job.resume and job.overwrite:
            raise JobError("--resume continues FILE's run, --overwrite replaces it: one of them")
        if job.pmem and sim != "verilator":
            raise JobError("--pmem maps the media from a file through Verilator's backdoor; "
                           "use --sim verilator")
        if config.model.tables and not job.pool_member:
            raise JobError("model.tables is what a pool gives its devices; to spread the "
                           "tables over devices set --devices N (pool.devices)")
        if config.pool.devices > 1:
            job._check_pool(config, system)
        elif job.checkpointing:
            # The undo log must hold the distinct rows of the batches live at once.
            try:
                check_checkpoint_regions(config, job.batch_size,
                                         [data.batch(i) for i in range(job.batches)],
                                         relaxed=job.relaxed)
            except ValueError as e:
                raise JobError(str(e)) from None
        paths = {name: str(Path(getattr(job, name)).resolve())
                 for name in ("dump", "export", "pmem") if getattr(job, name)}
        return job.replace(**paths)

    def _check_pool(self, config, system):
        """What a pool of devices runs today: device systems, failures of the pool
        (:func:`~trainingcxl.host.protocol.pool.device_failures`; media files and
        held-out tests are for one device yet), and each device's undo log sized for
        its share of the batches."""
        from trainingcxl.host.model.regions import check_checkpoint_regions
        from trainingcxl.host.model.data import SyntheticWorkload
        from trainingcxl.host.model.shard import shard_batch
        from trainingcxl.spec.config import ConfigError
        from trainingcxl.spec.pool import shards
        if not system.engines:
            raise JobError(f"a pool of devices trains with the device's engines; system "
                           f"{system.name} has none (use cxl, cxl-b, cxl-d or near-data)")
        from trainingcxl.host.protocol.pool import device_failures
        try:
            device_failures(self.failures, 0)
        except ValueError as e:
            raise JobError(str(e)) from None
        for what, given in (("--pmem", self.pmem),
                            ("--dump", self.dump), ("--export", self.export),
                            ("a held-out test set", self.test_samples and self.eval_every)):
            if given:
                raise JobError(f"{what}: not yet on a pool of devices (pool.devices = "
                               f"{config.pool.devices}); docs/pool.md says what runs")
        if self.data != "synthetic":
            raise JobError("a pool of devices trains on synthetic data yet")
        try:
            plan = shards(config)
        except ConfigError as e:
            raise JobError(str(e)) from None
        for s in plan:                  # split tables: a device may hold more pieces than tables
            try:
                check_bags(s.config, self.batch_size)
            except JobError as e:
                raise JobError(f"device {s.device}, {len(s.tables)} pieces: {e}") from None
        if self.checkpointing:
            data = SyntheticWorkload(config, seed=self.seed, batch_size=self.batch_size,
                                     min_pooling=self.min_pooling, zipf_alpha=self.zipf_alpha)
            batches = [data.batch(i) for i in range(self.batches)]
            for s in plan:
                try:
                    check_checkpoint_regions(s.config, self.batch_size,
                                             [shard_batch(b, s.tables, s.ranges)
                                              for b in batches],
                                             relaxed=self.relaxed)
                except ValueError as e:
                    raise JobError(f"device {s.device}: {e}") from None

    def _with_data(self, config, note):
        """The job with its data and test set checked (TSV files read, paths made
        absolute), and the training data."""
        from pathlib import Path
        from trainingcxl.host.model.criteo import CriteoDataset
        from trainingcxl.host.model.data import SyntheticWorkload
        if self.data == "synthetic":
            if self.test or self.test_fraction:
                raise JobError("--test and --test-fraction are for TSV data; synthetic data "
                               "holds out --test-samples samples of another seeded stream")
            if self.eval_every and not self.test_samples:
                raise JobError("--eval-every needs a test set (--test-samples 0 has none)")
            return self, SyntheticWorkload(config, seed=self.seed, batch_size=self.batch_size,
                                           min_pooling=self.min_pooling,
                                           zipf_alpha=self.zipf_alpha)
        job = self.replace(test_samples=0, data=str(Path(self.data).resolve()))
        if job.test and job.test_fraction:
            raise JobError("give --test FILE or --test-fraction F, not both")
        if not (job.test or job.test_fraction):
            if job.eval_every:
                raise JobError("--eval-every needs a test set: --test FILE or --test-fraction F")
            note(f"no held-out test set for {self.data} (--test FILE or --test-fraction F); "
                 f"training loss only")
        try:
            if job.test:
                CriteoDataset(config, job.test, batch_size=job.batch_size,
                              on_error=job.on_bad_lines).test_set().check_labels()
                job = job.replace(test=str(Path(job.test).resolve()))
            data = CriteoDataset(config, job.data, batch_size=job.batch_size,
                                 on_error=job.on_bad_lines)
            if job.test_fraction:
                data, held = data.split(job.test_fraction)
                held.test_set().check_labels()
        except (OSError, ValueError) as e:
            raise JobError(str(e)) from None
        if data.skipped:
            note(f"skipped {data.skipped} malformed lines of {self.data}, first: {data.problems[0]}")
        if data.passes(job.batches) > 1:
            note(f"{job.batches} batches of {job.batch_size} take {job.batches * job.batch_size:,} "
                 f"samples and {self.data} has {len(data):,} to train on: the run reads them "
                 f"{data.passes(job.batches):.2f} times (more than one epoch)")
        return job, data


@dataclass(frozen=True)
class LookupJob(Job):
    """``LOOKUP`` batches checked against the golden model (``lookup-demo``,
    ``bench-lookup``, the engine efficiency of ``bench``)."""
    app: ClassVar[str] = "lookup_app"
    seed: int = option(0, "workload and table seed")
    batches: int = option(4, "batches to run")
    batch_size: int = option(32, "samples per batch; each sample has one bag per table")
    min_pooling: int = option(0, "smallest bag")
    max_pooling: int = option(None, "largest bag", default_text="the configuration's")
    zipf_alpha: float = option(ZIPF_ALPHA, "Zipf exponent of the rows' popularity")
    host_delay: tuple = option(None, "host memory's answer delay in cycles, a (min, max) pair",
                               default_text="the harness's")
    protocol_checks: bool = option(False, "watch every stream the device drives")

    @classmethod
    def bandwidth(cls, config, **fields):
        """Bags from half the largest up: long enough that the gather streams."""
        return cls(min_pooling=config.max_pooling // 2, **fields)

    def validated(self, config):
        check_bags(config, self.batch_size)
        if self.max_pooling is not None and not 0 <= self.max_pooling <= config.max_pooling:
            raise JobError(f"--max-pooling must be in [0, {config.max_pooling}] for this "
                           f"configuration")
        return self


@dataclass(frozen=True)
class UpdateJob(Job):
    """``UPDATE`` batches against the PMEM bound (``bench-update``, ``bench``)."""
    app: ClassVar[str] = "update_app"
    seed: int = option(0, "workload and table seed")
    batches: int = option(2, "batches to run")
    batch_size: int = option(64, "samples per batch; each sample has one bag per table")
    min_pooling: int = option(0, "smallest bag")

    @classmethod
    def bandwidth(cls, config, **fields):
        """Bags from a quarter of the largest up: hot rows repeat within a batch."""
        return cls(min_pooling=config.max_pooling // 4, **fields)

    def validated(self, config):
        check_bags(config, self.batch_size)
        return self


@dataclass(frozen=True)
class FuzzJob(Job):
    """Invalid CXL.mem messages and descriptors between checked operations (``fuzz``)."""
    app: ClassVar[str] = "fuzz_app"
    seed: int = option(0, "fuzz seed")
    cases: int = option(200, "invalid inputs to send")
    every: int = option(10, "a checked valid operation after every N invalid inputs")


@dataclass(frozen=True)
class BoardJob(Job):
    """Training through the UART host bridge of the simulated board top."""
    app: ClassVar[str] = "board_app"
    seed: int = option(0, "workload and table seed")
    batches: int = option(4, "batches to run")
    batch_size: int = option(None, "samples per batch", default_text="the board's")
    staleness: int = option(0, "staleness bound K")
    failures: tuple = option((), "(batch, phase) pairs: a power failure just after the phase's "
                             "descriptor")
    button: tuple = option((), "batches at whose start the board's button (FIRE 2) is pressed")
    quiet: bool = option(False, "no line per batch")
    record_class: ClassVar[type] = TrainRecord


def check_bags(config, batch_size):
    """A batch of ``batch_size`` samples must fit the descriptor's bags."""
    if batch_size * config.n_tables > config.max_bags:
        raise JobError(f"--batch-size {batch_size} x {config.n_tables} tables exceeds the "
                       f"configuration's max_bags ({config.max_bags})")

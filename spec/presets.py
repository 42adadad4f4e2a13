"""The named configurations: presets for demos, tests and boards, the Criteo Kaggle
model at scale, and the scale ladder's models; and :func:`load_config`, which
takes a preset's name or a file of :class:`~.config.Config` fields."""

import dataclasses
import json
import tomllib
from pathlib import Path

from .config import Config, ConfigError, ModelShape, PmemTiming

__all__ = ["PRESETS", "load_config", "CRITEO_KAGGLE_ROWS", "CRITEO_KAGGLE_CAP", "criteo_kaggle",
           "SCALE_ROWS", "SCALE_BATCHES", "SCALE_TABLES", "SCALE_POOLING", "rm_config",
           "scale_ladder"]


#: The 26 categorical columns of the Criteo Kaggle data set (Display Advertising
#: Challenge, 45,840,617 samples): distinct values per column, as counted by the
#: DLRM reference's preprocessing of ``train.txt`` (facebookresearch/dlrm,
#: ``data_utils.py``), which sizes the tables of its Kaggle run; 33,762,577 in all.
CRITEO_KAGGLE_ROWS = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683,
                      8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15,
                      286181, 105, 142572)
#: Hashing size of the ``criteo-kaggle`` preset: a column with more distinct
#: values shares 2**18 rows (``int(id, 16) % rows``), as the DLRM reference's
#: ``--max-ind-range`` does. Six columns are capped; the tables hold 1,855,979
#: rows (116 MB at dim 16) and the media stays under 2**21 lines (128 MiB).
CRITEO_KAGGLE_CAP = 1 << 18


def criteo_kaggle(cap=CRITEO_KAGGLE_CAP, batch_size=128):
    """The Criteo Kaggle DLRM of the reference code, its tables hashed to at most ``cap`` rows.

    ``bench/dlrm_s_criteo_kaggle.sh`` of facebookresearch/dlrm: embedding
    dim 16, bottom MLP 13-512-256-64-16, top MLP 512-256-1 (the top MLP's
    input is the bottom output and the 27 * 26 / 2 = 351 pairwise dot
    products), SGD with learning rate 0.1, batches of 128. One index per bag
    (Criteo has one value per column), so ``max_pooling = 1``; ``max_bags``
    holds a batch of 26 bags a sample.
    """
    return Config(tables=tuple(min(rows, cap) for rows in CRITEO_KAGGLE_ROWS), max_pooling=1,
                  max_bags=_pow2_at_least(batch_size * len(CRITEO_KAGGLE_ROWS)),
                  model=ModelShape(bottom_hidden=(512, 256, 64), top_hidden=(512, 256),
                                   lr=0.1, batch_size=batch_size))


#: The scale ladder: rows of every table (by name) and the batch sizes.
SCALE_ROWS = {"rm-1k": 1_000, "rm-100k": 100_000, "rm-1m": 1_000_000}
SCALE_BATCHES = (32, 256, 2048)
#: Tables and largest bag of the ladder's models.
SCALE_TABLES, SCALE_POOLING = 8, 32


def rm_config(rows, batch_size=256):
    """An embedding-dominated DLRM of ``SCALE_TABLES`` tables of ``rows`` rows each.

    In the spirit of the RM1 class of Gupta et al., "The Architectural
    Implications of Facebook's DNN-based Personalized Recommendation" (HPCA
    2020): few tables, tens of lookups per table and sample, small MLPs, so
    the embedding work dominates a batch. Here 8 tables, bags of up to 32 rows
    (``max_pooling``; meant to be drawn from 16 to 32), dim 16 (one line a row,
    as in every other preset), bottom MLP 13-256-128-16 and top MLP
    52-256-64-1, 13 dense features so that Criteo data fits too. ``max_bags``
    covers the ladder's largest batch (2048 x 8 bags) whatever ``batch_size``
    is; the undo log is sized for ``batch_size``. An update moves tens of thousands of
    lines from host memory here: each stream keeps a round trip's worth of reads in
    flight at the link's rate (about 60 cycles at a line a cycle: ``host_window`` 64,
    where 32 left the update waiting for its deltas), with command queue ids for two
    such streams (``cache_ids``).
    """
    return Config(tables=(rows,) * SCALE_TABLES, max_pooling=SCALE_POOLING,
                  cache_ids=128, host_window=64,
                  max_bags=_pow2_at_least(max(SCALE_BATCHES + (batch_size,)) * SCALE_TABLES),
                  model=ModelShape(bottom_hidden=(256, 128), top_hidden=(256, 64), lr=0.1,
                                   batch_size=batch_size))


def scale_ladder(rows=tuple(SCALE_ROWS), batches=SCALE_BATCHES):
    """``(name, Config)`` for every table size and batch size of the scale ladder,
    named like ``rm-100k/b256``.

    The batch sizes of one table size share one device (one
    :meth:`Config.hardware_digest`, so one simulator build): ``max_bags`` and
    the undo log are those of the largest batch in ``batches``, and only the
    host-side ``model.batch_size`` differs."""
    out = []
    for name in rows:
        device = rm_config(SCALE_ROWS[name], max(batches))
        device = device.replace(log_lines=device.log_size)
        out += [(f"{name}/b{b}", device.replace(model=dataclasses.replace(device.model, batch_size=b)))
                for b in batches]
    return out


def _pow2_at_least(n):
    return 1 << max(0, (n - 1).bit_length())


#: Named configurations. ``tiny`` is small enough for Icarus; ``small`` is the
#: default for demos and training; ``bench`` has enough rows to measure
#: streaming bandwidth; ``kaggle-like`` has the shape of the Criteo Kaggle DLRM
#: (13 dense features, 26 tables, dim 16, MLPs 13-512-256-64-16 and
#: 512-256-1, SGD lr 0.1, batch 128) with every table capped at 512 rows, a
#: quick check of the full model. At scale, ``criteo-kaggle``
#: (:func:`criteo_kaggle`) is that model with the Kaggle tables hashed to at
#: most 2**18 rows (1.86 million rows), and ``rm-1k``, ``rm-100k`` and
#: ``rm-1m`` the scale ladder's models (:func:`rm_config`) with batches of 256.
PRESETS = {
    "tiny": Config(tables=(32, 48), max_pooling=8, max_bags=256, cache_timeout=4096,
                   model=ModelShape(bottom_hidden=(32,), top_hidden=(32,), batch_size=16)),
    "small": Config(tables=(512, 256, 1024, 128), max_pooling=16, max_bags=2048),
    # ``small``'s device with tables of a million rows: 2**22 media lines
    # (256 MiB), to show that size costs memory, not build or run time.
    "large": Config(tables=(1_000_000,) * 4, max_pooling=16, max_bags=2048),
    "bench": Config(tables=(1024,) * 4, max_pooling=32, max_bags=8192),
    "kaggle-like": Config(tables=(512,) * 26, max_pooling=4, max_bags=4096,
                          model=ModelShape(bottom_hidden=(512, 256, 64), top_hidden=(512, 256),
                                           lr=0.1, batch_size=128)),
    "criteo-kaggle": criteo_kaggle(),
    **{name: rm_config(rows) for name, rows in SCALE_ROWS.items()},
    # FPGA boards (boards/): bags, queues and in-flight windows are sized for
    # one batch of 16, and block RAM is the GPU's memory. A board's link is
    # the UART: the link timing model is left out, and the host trains in
    # strict order: no relaxed-lookup support. Register slices at the ports
    # shorten the arbiters' paths for the board's clock, and checksums in eight
    # parts shrink the CRC networks. The 85F keeps the PMEM media in the
    # board's SDRAM (room for half a million lines) behind a PMEM timing
    # slower than the SDRAM, so that the model's timing holds
    # (``MEDIA_LATE``); its 100,000 rows have 9-bit epoch stamps in block RAM
    # (full stamps would take 4.8 Mbit). The logger's buffer of 16 lines sits
    # in LUT RAM: 512-bit buses meeting block RAM congest the routing; for
    # the same reason lines cross between PMEM and the engines in beats of 64 bits.
    "ulx3s": Config(tables=(50_000, 50_000), stamp_bits=9, max_pooling=8, max_bags=32,
                    log_buffer=16,
                    defer_depth=64, cache_ids=16, host_window=4, blocks=("update", "checkpoint"),
                    register_slices=True, crc_folds=8, line_beats=8, media="sdram",
                    pmem=PmemTiming(read_latency=128, write_latency=192, read_rate=(1, 80),
                                    write_rate=(1, 160), read_depth=4, wpq_depth=8),
                    model=ModelShape(bottom_hidden=(16,), top_hidden=(16,), batch_size=16)),
    # The LFE5U-12F holds the pooling device only: the lookup engine with
    # its PMEM, CXL.mem target and control window (no update or checkpoint
    # engine, no relaxed lookup, no link model, no GPU window check: with it
    # the build reaches 73% of the LUTs and no longer routes).
    "ulx3s-12f": Config(tables=(16, 24), max_pooling=4, max_bags=16, log_buffer=32,
                        defer_depth=16, cache_ids=4, host_window=2, desc_depth=2,
                        pmem=PmemTiming(read_latency=8, write_latency=16, read_depth=4, wpq_depth=4),
                        blocks=(), gpu_window=False,
                        model=ModelShape(bottom_hidden=(8,), top_hidden=(8,), batch_size=8)),
}


def load_config(spec):
    """A preset name, or a path to a ``.json`` or ``.toml`` file of :class:`Config` fields."""
    if isinstance(spec, Config):
        return spec
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if not path.exists():
        raise ConfigError(f"{spec!r} is neither a preset ({', '.join(PRESETS)}) nor an existing file")
    text = path.read_text()
    try:
        d = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: {e}") from None
    return Config.from_dict(d)

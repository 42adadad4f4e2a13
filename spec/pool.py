"""A pool of devices: which device holds which table, and each device's configuration.

The pool's model has the tables of ``Config.tables``; ``Config.pool.devices``
devices hold them, whole tables each, placed largest first on the device with
the fewest rows so far (a greedy balance of rows, hence of the media each device
needs and of the lookups it serves under a uniform pooling). A device is today's
device, built from its own configuration: its tables, the model's MLP sized for
all of the pool's tables (``model.tables``: every device snapshots the whole MLP),
and, with more than one device, the switch's latency added to its link.

Splitting one table's rows over several devices is not done: a pool has at most
as many devices as tables.
"""

from dataclasses import dataclass, replace

from .config import ConfigError, LinkTiming, PoolShape

__all__ = ["Shard", "shards", "device_configs"]


@dataclass(frozen=True)
class Shard:
    """Device ``device`` of a pool: the model's tables it holds (ascending) and its
    configuration."""
    device: int
    tables: tuple[int, ...]
    config: object


def _placement(rows, devices):
    """Per device, the table numbers it holds: largest table first onto the device with
    the fewest rows (the lower device number on a tie)."""
    load, held = [0] * devices, [[] for _ in range(devices)]
    for t in sorted(range(len(rows)), key=lambda t: (-rows[t], t)):
        d = min(range(devices), key=lambda d: (load[d], d))
        load[d] += rows[t]
        held[d].append(t)
    return [tuple(sorted(h)) for h in held]


def shards(config):
    """The :class:`Shard` of every device of ``config``'s pool."""
    n = config.pool.devices
    if n > config.n_tables:
        raise ConfigError(f"pool.devices = {n} but the model has {config.n_tables} tables: "
                          f"a device holds whole tables, so at most {config.n_tables} devices")
    if n == 1:
        return [Shard(0, tuple(range(config.n_tables)), config)]
    link = LinkTiming(latency=config.link.latency + config.pool.switch_latency,
                      rate=config.link.rate)
    out = []
    for d, tables in enumerate(_placement(config.tables, n)):
        cfg = replace(config, tables=tuple(config.tables[t] for t in tables), link=link,
                      model=replace(config.model, tables=config.model_tables),
                      pool=PoolShape(devices=1, switch_latency=config.pool.switch_latency,
                                    member=True))
        out.append(Shard(d, tables, cfg))
    return out


def device_configs(config):
    """Each device's configuration, in device order."""
    return [s.config for s in shards(config)]

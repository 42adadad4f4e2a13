"""A pool of devices: which device holds which rows of which table, and each device's
configuration.

The pool's model has the tables of ``Config.tables``; ``Config.pool.devices``
devices hold them. A device holds *pieces*: whole tables, or with ``pool.split``
ranges of a table's rows (:func:`pieces`: the largest piece is halved until there
are at least as many pieces as devices, none holds more than a device's share of
the rows, and the placement leaves no device more than 1/16 over it). Pieces are placed largest first on the device with the fewest rows
so far (a greedy balance of rows, hence of the media each device needs and of the
lookups it serves under a uniform pooling). A device is today's device, built from
its own configuration: its pieces as its tables, the model's MLP sized for all of
the pool's tables (``model.tables``: every device snapshots the whole MLP), and,
with more than one device, the switch's latency added to its link.

A bag of a split table is pooled by every device that holds some of its rows, each
over its own rows (:mod:`trainingcxl.host.model.shard`), and the parts are added
in fixed point, which wraps as the device does: the sum is the one device's,
bit for bit; the update sends the bag's gradient to each of them.
"""

from dataclasses import dataclass, replace

from .config import ConfigError, LinkTiming, PoolShape

__all__ = ["Shard", "BALANCE", "pieces", "shards", "device_configs"]


@dataclass(frozen=True)
class Shard:
    """Device ``device`` of a pool: the model table of each of its pieces (``tables``,
    ascending) with the rows ``ranges[j] = (first, end)`` of piece ``j``, and its
    configuration."""
    device: int
    tables: tuple[int, ...]
    config: object
    ranges: tuple[tuple[int, int], ...]

    def label(self, model_rows):
        """The pieces as text, given the model's tables' rows: ``2`` for a whole table,
        ``0[0:512]`` for rows 0 to 511 of table 0."""
        return ", ".join(str(t) if (lo, hi) == (0, model_rows[t]) else f"{t}[{lo}:{hi}]"
                         for t, (lo, hi) in zip(self.tables, self.ranges))


#: How far over its share of the rows (``ceil(rows / devices)``) split tables may leave
#: a device: pieces are halved until the greedy placement stays within it.
BALANCE = 1 / 16


def pieces(rows, devices, split):
    """The pieces of tables with ``rows`` rows for ``devices`` devices: ``(table, first,
    end)`` ascending. Whole tables; with ``split``, the largest piece (the first such)
    halved until there are at least ``devices`` pieces, none has more than a device's
    share of the rows, ``ceil(sum(rows) / devices)``, and the placement
    (:func:`_placement`) leaves no device more than :data:`BALANCE` over its share (or
    the largest piece is one row)."""
    out = [(t, 0, n) for t, n in enumerate(rows)]
    if not split:
        if devices > len(rows):
            raise ConfigError(f"pool.devices = {devices} but the model has {len(rows)} tables: "
                              f"a device holds whole tables, so at most {len(rows)} devices "
                              f"(pool.split = true splits tables into ranges of rows)")
        return out
    if devices > sum(rows):
        raise ConfigError(f"pool.devices = {devices}: more devices than the tables' "
                          f"{sum(rows)} rows")
    share = -(-sum(rows) // devices)
    while True:
        t, lo, hi = max(out, key=lambda p: (p[2] - p[1], -p[0], -p[1]))
        if len(out) >= devices and hi - lo <= share:
            loads = [sum(p[2] - p[1] for p in held) for held in _placement(out, devices)]
            if max(loads) <= share * (1 + BALANCE) or hi - lo < 2:
                return sorted(out)
        mid = lo + (hi - lo) // 2
        out.remove((t, lo, hi))
        out += [(t, lo, mid), (t, mid, hi)]


def _placement(parts, devices):
    """Per device, the pieces it holds: largest piece first onto the device with the
    fewest rows (the lower device number on a tie)."""
    load, held = [0] * devices, [[] for _ in range(devices)]
    for p in sorted(parts, key=lambda p: (p[1] - p[2], p)):
        d = min(range(devices), key=lambda d: (load[d], d))
        load[d] += p[2] - p[1]
        held[d].append(p)
    return [sorted(h) for h in held]


def shards(config):
    """The :class:`Shard` of every device of ``config``'s pool."""
    n = config.pool.devices
    if n == 1:
        return [Shard(0, tuple(range(config.n_tables)), config,
                      tuple((0, rows) for rows in config.tables))]
    link = LinkTiming(latency=config.link.latency + config.pool.switch_latency,
                      rate=config.link.rate)
    out = []
    for d, held in enumerate(_placement(pieces(config.tables, n, config.pool.split), n)):
        cfg = replace(config, tables=tuple(hi - lo for _, lo, hi in held), link=link,
                      model=replace(config.model, tables=config.model_tables),
                      pool=PoolShape(devices=1, switch_latency=config.pool.switch_latency,
                                    member=True))
        out.append(Shard(d, tuple(t for t, _, _ in held), cfg,
                         tuple((lo, hi) for _, lo, hi in held)))
    return out


def device_configs(config):
    """Each device's configuration, in device order."""
    return [s.config for s in shards(config)]

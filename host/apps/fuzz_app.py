"""Fuzzing the device: random invalid CXL.mem messages and descriptors mixed with
checked training traffic (the job behind ``trainingcxl fuzz``).

The job is a :class:`~trainingcxl.host.jobs.FuzzJob`: ``cases`` invalid inputs,
with a checked lookup, update and commit after ``every`` of them.

After every invalid input the job checks that it was refused as specified
(error code, CXL.mem response, error counter); after every valid batch that
the pooled vectors equal the golden model's and that ``COMMITTED`` moved to
the batch; at the end that every table row equals the golden model's.
"""

import json
import random
import sys

import cocotb
import numpy as np

from trainingcxl.spec.descriptors import ErrorCode, Op
from trainingcxl.spec.registers import Reg
from trainingcxl.spec.cxl_messages import M2SReqOpcode, M2SRwDOpcode, S2MDrsOpcode, S2MNdrOpcode
from trainingcxl.spec.config import LINE_BYTES
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.golden import embedding_bag_sum, embedding_update
from trainingcxl.sim.cxl_mem_master import FULL_BE
from trainingcxl.host.driver.device import rows_to_lines
from trainingcxl.host.driver.ports import DeviceTB
from trainingcxl.sim.bench_env import bench_config
from trainingcxl.host.jobs import FuzzJob
from .launch import read_job
from .job_records import FuzzRecord, NotRefused

#: The kinds of invalid input, each with the refusal it must get.
KINDS = ("mem_unmapped_read", "mem_unmapped_write", "mem_protected_write", "mem_poisoned_write",
         "mem_tag_reuse_read", "mem_tag_reuse_write", "mem_unknown_opcode",
         "row_range", "bad_offsets", "pooling", "bad_op", "misaligned", "out_of_window",
         "not_logged", "bad_batch_commit", "stale_batch")

#: Opcode values the CXL.mem target does not implement, by channel.
UNKNOWN_REQ = tuple(sorted(set(range(16)) - {o.value for o in M2SReqOpcode}))
UNKNOWN_RWD = tuple(sorted(set(range(16)) - {o.value for o in M2SRwDOpcode}))


def progress(text):
    print(text, file=sys.stderr, flush=True)


class Fuzzer:
    """Sends one invalid input of a kind and says whether it was refused as specified."""

    def __init__(self, tb, rng, workload, tables):
        self.tb, self.rng, self.wl = tb, rng, workload
        self.cfg = tb.config
        self.committed = None
        self.tables = tables            # the golden tables, kept current by the caller
        self.cleared_errors = 0         # descriptor errors counted before ERROR was cleared

    def _table_line(self):
        """A random table line: its host address and what the golden model says it holds."""
        cfg, rng = self.cfg, self.rng
        t = rng.randrange(cfg.n_tables)
        row = rng.randrange(cfg.tables[t])
        k = rng.randrange(cfg.lines_per_row)
        return self.tb.row_addr(t, row) + k, rows_to_lines(self.tables[t][row:row + 1])[k]

    async def _tag_reuse(self, write):
        """Two requests with one tag, back to back, to table lines: the second is
        refused at once with that tag, the first completes normally. A write
        rewrites what its line holds; the refused one would change its line."""
        tb = self.tb
        tag = tb.mem.free_tag(self.rng)
        (a, line_a), (b, _) = self._table_line(), self._table_line()
        if write:
            msg = [("rwd", {"opcode": M2SRwDOpcode.MemWr, "tag": tag, "addr": a, "data": line_a,
                            "be": FULL_BE, "poison": 0}),
                   ("rwd", {"opcode": M2SRwDOpcode.MemWr, "tag": tag, "addr": b,
                            "data": self.rng.getrandbits(512), "be": FULL_BE, "poison": 0})]
        else:
            msg = [("req", {"opcode": M2SReqOpcode.MemRd, "tag": tag, "addr": a}),
                   ("req", {"opcode": M2SReqOpcode.MemRd, "tag": tag, "addr": b})]

        async def answers():
            first, second = await tb.mem.exchange(msg, 2)
            if write:
                return (first.opcode, second.opcode)
            return (first.opcode, bool(first.poison), second.opcode, bool(second.poison),
                    second.data == line_a)
        want = ((S2MNdrOpcode.CmpErr, S2MNdrOpcode.Cmp) if write else
                (S2MDrsOpcode.MemData, True, S2MDrsOpcode.MemData, False, True))
        return await self._mem_refused(answers, want)

    async def _unknown_opcode(self):
        tb, rng = self.tb, self.rng
        tag = tb.mem.free_tag(rng)
        addr, _ = self._table_line()
        if rng.random() < 0.5:
            msg = ("req", {"opcode": rng.choice(UNKNOWN_REQ), "tag": tag, "addr": addr})
            want = (S2MDrsOpcode.MemData, 1)
        else:
            msg = ("rwd", {"opcode": rng.choice(UNKNOWN_RWD), "tag": tag, "addr": addr,
                           "data": rng.getrandbits(512), "be": FULL_BE, "poison": 0})
            want = (S2MNdrOpcode.CmpErr, 0)

        async def answer():
            (rsp,) = await tb.mem.exchange([msg], 1)
            return (rsp.opcode, int(getattr(rsp, "poison", 0)))
        return await self._mem_refused(answer, want)

    def _batch(self):
        return self.wl.batch(self.rng.randrange(1 << 16))

    async def _mem_refused(self, send, expect):
        before = await self.tb.ctl.read(Reg.MEM_ERRORS)
        got = await send()
        after = await self.tb.ctl.read(Reg.MEM_ERRORS)
        return got == expect and after == before + 1

    async def send(self, kind, batch_id):
        tb, cfg, rng = self.tb, self.cfg, self.rng
        if kind == "mem_unmapped_read":
            addr = cfg.hdm_base + cfg.media_lines + rng.randrange(1 << 20)
            async def poisoned():
                return (await tb.mem.read(addr))[1]
            return await self._mem_refused(poisoned, True)
        if kind == "mem_unmapped_write":
            addr = rng.choice([cfg.hdm_base - 1 - rng.randrange(1 << 10),
                               cfg.hdm_base + cfg.media_lines + rng.randrange(1 << 20)])
            return await self._mem_refused(lambda: tb.mem.write(addr, rng.getrandbits(64)),
                                           S2MNdrOpcode.CmpErr)
        if kind == "mem_protected_write":
            addr = cfg.hdm_base + rng.randrange(cfg.table_lines, cfg.media_lines)
            return await self._mem_refused(lambda: tb.mem.write(addr, rng.getrandbits(64)),
                                           S2MNdrOpcode.CmpErr)
        if kind == "mem_poisoned_write":
            addr = cfg.hdm_base + rng.randrange(cfg.table_lines)
            return await self._mem_refused(
                lambda: tb.mem.write(addr, rng.getrandbits(64), poison=True), S2MNdrOpcode.CmpErr)
        if kind in ("mem_tag_reuse_read", "mem_tag_reuse_write"):
            return await self._tag_reuse(kind.endswith("write"))
        if kind == "mem_unknown_opcode":
            return await self._unknown_opcode()
        b = self._batch()
        indices, offsets = b.indices.copy(), b.offsets.copy()
        if kind == "row_range":
            if not len(indices):
                return await self.send("bad_op", batch_id)
            k = rng.randrange(len(indices))
            bag = int(np.searchsorted(offsets, k, side="right") - 1)
            indices[k] = cfg.tables[bag % cfg.n_tables] + rng.randrange(1 << 10)
            return (await tb.lookup(batch_id, indices, offsets)).error == ErrorCode.ROW_RANGE
        if kind == "bad_offsets":
            offsets = offsets.astype(np.int64)
            offsets[-1] = offsets[-1] + 1 + rng.randrange(8)      # does not end at n_indices
            return ((await tb.lookup(batch_id, indices, offsets.astype(np.uint32))).error
                    == ErrorCode.BAD_OFFSETS)
        if kind == "pooling":
            n = cfg.max_pooling + 1 + rng.randrange(4)
            indices = np.zeros(n, np.uint32)
            offsets = np.array([0, n] + [n] * (cfg.n_tables - 1), np.uint32)
            return (await tb.lookup(batch_id, indices, offsets)).error == ErrorCode.POOLING
        if kind == "bad_op":
            error, _ = await tb._run(Op.NOP, batch_id, 1, 0, tb.out_lines[0])
            return error == ErrorCode.BAD_OP
        if kind == "misaligned":
            before = await tb.ctl.read(Reg.SUBMITTED)
            errors = await tb.ctl.read(Reg.ERROR) >> 32
            await tb.submit(Op.LOOKUP, batch_id, n_bags=b.n_bags, n_indices=b.n_indices,
                            idx_addr=tb.idx_lines[0] * LINE_BYTES + 4 * rng.randrange(1, 16),
                            off_addr=tb.off_lines[0] * LINE_BYTES,
                            vec_addr=tb.out_lines[0] * LINE_BYTES)
            return (await tb.ctl.read(Reg.SUBMITTED) == before
                    and await tb.ctl.read(Reg.ERROR) >> 32 == errors + 1)
        if kind == "out_of_window":
            # One of the arrays starts below the host layout or runs past its end.
            layout = tb.layout
            arrays = [tb.idx_lines[0], tb.off_lines[0], tb.out_lines[0]]
            need = [-(-b.n_indices // 16), (b.n_bags + 16) // 16, b.n_bags * cfg.lines_per_row]
            k = rng.choice([j for j in range(3) if need[j]])
            arrays[k] = rng.choice([layout.base - 1 - rng.randrange(64),
                                    layout.base + layout.lines - rng.randrange(need[k])])
            before = await tb.ctl.read(Reg.SUBMITTED)
            self.cleared_errors += await tb.ctl.read(Reg.ERROR) >> 32
            await tb.ctl.write(Reg.ERROR, 0)
            await tb.submit(rng.choice([Op.LOOKUP, Op.UPDATE]), batch_id, n_bags=b.n_bags,
                            n_indices=b.n_indices, idx_addr=arrays[0] * LINE_BYTES,
                            off_addr=arrays[1] * LINE_BYTES, vec_addr=arrays[2] * LINE_BYTES)
            return (await tb.ctl.read(Reg.SUBMITTED) == before
                    and await tb.ctl.read(Reg.ERROR) == ErrorCode.OUT_OF_WINDOW.value | 1 << 32)
        if kind == "not_logged":
            deltas = np.ones((b.n_bags, cfg.dim), np.int32)
            error, _ = await tb.update(batch_id, indices, offsets, deltas)
            return error == ErrorCode.NOT_LOGGED
        if kind == "bad_batch_commit":
            if self.committed is None:
                return await self.send("bad_op", batch_id)
            return await tb.commit(rng.randrange(self.committed + 1)) == ErrorCode.BAD_BATCH
        if kind == "stale_batch":
            # A LOOKUP or UPDATE of a batch at or before the newest commit.
            stale = rng.randrange(self.committed + 1)
            if rng.random() < 0.5:
                return (await tb.lookup(stale, indices, offsets)).error == ErrorCode.BAD_BATCH
            deltas = np.ones((b.n_bags, cfg.dim), np.int32)
            return (await tb.update(stale, indices, offsets, deltas))[0] == ErrorCode.BAD_BATCH
        raise ValueError(kind)


@cocotb.test()
async def fuzz_job(dut):
    cfg = bench_config()
    job, out_path = read_job(FuzzJob)
    seed, cases, every = job.seed, job.cases, max(1, job.every)
    rng = random.Random(seed)
    tb = DeviceTB(dut, cfg, seed=seed)
    await tb.reset()
    tables = initial_tables(cfg, seed=seed)
    await tb.load_tables(tables)
    # A fresh device: RECOVER finds no checkpoint and takes the staleness bound
    # from the register (255, so the fuzzer need not snapshot often).
    await tb.configure_checkpoints(255)
    await tb.recover()
    # Batch 0 committed with its snapshot: lookups are held while the newest
    # snapshot lags the newest commit by more than the staleness bound.
    assert await tb.commit(0) == ErrorCode.NONE
    await tb.stage_mlp(np.zeros(cfg.mlp_params, np.float32))
    assert await tb.snapshot(0) == ErrorCode.NONE
    await tb.wait_snapshot(0)
    wl = SyntheticWorkload(cfg, seed=seed, batch_size=4)
    fuzz = Fuzzer(tb, rng, wl, tables)
    fuzz.committed = 0
    rec = FuzzRecord(by_kind={k: 0 for k in KINDS})
    batch_id = 0
    try:
        for case in range(cases):
            kind = rng.choice(KINDS)
            # Invalid descriptors carry the id of the batch trained next, as a host
            # retrying it would: the undo records a refused LOOKUP leaves in the
            # ring are reclaimed when that batch commits.
            ok = await fuzz.send(kind, batch_id + 1)
            rec.cases += 1
            rec.invalid += 1
            rec.by_kind[kind] += 1
            if ok:
                rec.refused += 1
            else:
                rec.not_refused.append(NotRefused(case=case, kind=kind))
            if (case + 1) % every == 0:
                batch_id += 1
                b = wl.batch(batch_id)
                res = await tb.lookup(batch_id, b.indices, b.offsets)
                want = embedding_bag_sum(cfg, tables, b.indices, b.offsets)
                if res.error != ErrorCode.NONE or not np.array_equal(res.pooled, want.pooled):
                    rec.corruptions += 1
                deltas = np.asarray(np.random.default_rng(seed + batch_id).integers(
                    -2**12, 2**12, (b.n_bags, cfg.dim)), np.int32)
                error, _ = await tb.update(batch_id, b.indices, b.offsets, deltas)
                if error == ErrorCode.NONE:
                    tables = embedding_update(cfg, tables, b.indices, b.offsets, deltas)
                    fuzz.tables = tables
                else:
                    rec.corruptions += 1
                if await tb.commit(batch_id) != ErrorCode.NONE or \
                        (await tb.ctl.read(Reg.COMMITTED)) & 0xFFFFFFFF != batch_id:
                    rec.lost_commits += 1
                fuzz.committed = batch_id
                rec.batches += 1
                if batch_id % 100 == 0:
                    # Keep the newest snapshot within the staleness bound of 255 commits.
                    await tb.stage_mlp(np.zeros(cfg.mlp_params, np.float32))
                    if await tb.snapshot(batch_id) != ErrorCode.NONE:
                        rec.lost_commits += 1
                    await tb.wait_snapshot(batch_id)
                progress(f"  case {case + 1}/{cases}: {rec.refused} refused, "
                         f"{rec.corruptions} corruptions, batch {batch_id} trained")
    except TimeoutError as e:
        rec.hangs += 1
        rec.hang = f"case {rec.cases} ({kind}): {e}"
    got = await tb.read_tables()
    for g, w in zip(got, tables):
        rec.corruptions += int((g != w).any(axis=1).sum())
    rec.counters = {"mem_errors": await tb.ctl.read(Reg.MEM_ERRORS),
                    "descriptor_errors": fuzz.cleared_errors + (await tb.ctl.read(Reg.ERROR) >> 32)}
    with open(out_path, "w") as f:
        json.dump(rec.to_dict(), f, indent=2)
    assert rec.hangs == 0, rec.hang
    assert rec.refused == rec.invalid, f"not refused: {rec.not_refused[:5]}"
    assert rec.corruptions == 0 and rec.lost_commits == 0, rec

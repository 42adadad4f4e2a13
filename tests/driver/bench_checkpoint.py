"""cocotb tests of the checkpoint engine on the whole device, under Verilator and Icarus.

Run through pytest (``tests/driver/test_checkpoint.py``). Training runs
with injected power failures live in :mod:`trainingcxl.host.apps.train`; these
tests pin down the engine's rules one at a time.
"""

import cocotb
import numpy as np

from trainingcxl.spec.descriptors import ErrorCode, Op
from trainingcxl.spec.registers import Reg
from trainingcxl.spec.cxl_messages import S2MNdrOpcode
from trainingcxl.spec.config import LINE_BYTES
from trainingcxl.host.model.data import SyntheticWorkload, initial_tables
from trainingcxl.host.model.golden import coalesce_update, embedding_update
from trainingcxl.host.model.regions import distinct_rows
from trainingcxl.host.driver.ports import DeviceTB
from trainingcxl.sim.bench_env import bench_args, bench_config

NONE = ErrorCode.NONE


async def formatted(dut, *, staleness=0, seed=1, host_model="auto"):
    """A device with tables loaded, batch 0 committed and snapshotted; returns
    ``(tb, tables, params0)``."""
    tb = DeviceTB(dut, bench_config(), seed=seed, host_model=host_model)
    await tb.reset()
    error, *_ = await tb.recover()
    assert error == ErrorCode.NO_CHECKPOINT, f"RECOVER on blank media: {error!r}"
    tables = initial_tables(tb.config, seed=seed)
    await tb.load_tables(tables)
    await tb.configure_checkpoints(staleness)
    assert await tb.commit(0) == NONE
    params = np.random.default_rng(seed).normal(size=tb.config.mlp_params).astype(np.float32)
    await tb.stage_mlp(params)
    assert await tb.snapshot(0) == NONE
    await tb.wait_snapshot(0)
    return tb, tables, params


async def train_batch(tb, b, batch, tables, rng):
    """LOOKUP and UPDATE of batch ``b`` with random deltas; returns the golden tables after it."""
    looked = await tb.lookup(b, batch.indices, batch.offsets)
    assert looked.error == NONE, f"lookup {b}: {looked.error!r}"
    deltas = rng.integers(-2**16, 2**16, size=(batch.n_bags, tb.config.dim)).astype(np.int32)
    error, _ = await tb.update(b, batch.indices, batch.offsets, deltas)
    assert error == NONE, f"update {b}: {error!r}"
    return embedding_update(tb.config, tables, batch.indices, batch.offsets, deltas)


async def assert_tables(tb, want, what):
    got = await tb.read_tables()
    for t, (g, w) in enumerate(zip(got, want)):
        bad = np.nonzero((g != w).any(axis=1))[0]
        assert len(bad) == 0, f"{what}: table {t} differs in {len(bad)} rows, first {bad[0]}"


@cocotb.test()
async def test_recover_rolls_back_what_is_not_durable(dut):
    """Batch 1 committed and snapshotted, batch 2 updated but not committed: after a
    power failure RECOVER returns D = m = 1, rows equal the golden model's after
    batch 1, the snapshot holds batch 1's parameters; a second RECOVER changes
    nothing (and an update may not lean on a lookup made before it); training
    resumes at batch 2."""
    args = bench_args()
    tb, tables, _ = await formatted(dut, seed=args.get("seed", 1))
    cfg = tb.config
    rng = np.random.default_rng(7)
    wl = SyntheticWorkload(cfg, seed=3, batch_size=args.get("batch_size", 4), zipf_alpha=1.4)
    after1 = await train_batch(tb, 1, wl.batch(1), tables, rng)
    assert await tb.commit(1) == NONE
    params1 = rng.normal(size=cfg.mlp_params).astype(np.float32)
    await tb.stage_mlp(params1)
    assert await tb.snapshot(1) == NONE
    await tb.wait_snapshot(1)
    await train_batch(tb, 2, wl.batch(2), after1, rng)
    state = await tb.checkpoint_state()
    assert state["durable"] == 1 and state["live_records"] == distinct_rows(cfg, wl.batch(2))

    await tb.power_fail()
    await tb.configure_checkpoints(0)       # the registers are lost with the power
    error, d, m, rolled, cycles, _ = await tb.recover()
    assert (error, d, m) == (NONE, 1, 1), (error, d, m)
    assert rolled == distinct_rows(cfg, wl.batch(2)), rolled
    dut._log.info("recovery: %d records rolled back in %d cycles", rolled, cycles)
    await assert_tables(tb, after1, "after recovery")
    np.testing.assert_array_equal(await tb.read_snapshot(1), params1)

    # A lookup logged for the generation a RECOVER ends does not cover an update after it.
    batch2 = wl.batch(2)
    assert (await tb.lookup(2, batch2.indices, batch2.offsets)).error == NONE
    error, d, m, rolled, *_ = await tb.recover()
    # The lookup logged batch 2's rows again, in the new generation; the records
    # persistent by now are rolled back (to the values they already hold), the rest
    # the recovery drops.
    assert (error, d, m) == (NONE, 1, 1), (error, d, m)
    assert rolled <= distinct_rows(cfg, batch2), rolled
    ones = np.ones((batch2.n_bags, cfg.dim), np.int32)
    assert (await tb.update(2, batch2.indices, batch2.offsets, ones))[0] == ErrorCode.NOT_LOGGED
    await assert_tables(tb, after1, "after a second recovery")

    after2 = await train_batch(tb, 2, wl.batch(2), after1, np.random.default_rng(9))
    assert await tb.commit(2) == NONE
    await assert_tables(tb, after2, "resumed")
    tb.check_models()


@cocotb.test()
async def test_checkpoint_rules_refuse_bad_requests(dut):
    """COMMIT before RECOVER, UPDATE of rows no lookup logged (a whole batch, or one
    row of a coalesced update), COMMIT out of order, SNAPSHOT of an uncommitted batch:
    each is refused and changes no row; the protected regions refuse CXL.mem writes."""
    tb = DeviceTB(dut, bench_config())
    await tb.reset()
    cfg = tb.config
    assert await tb.commit(0) == ErrorCode.NOT_RECOVERED
    assert await tb.snapshot(0) == ErrorCode.NOT_RECOVERED
    tables = initial_tables(cfg, seed=4)
    await tb.load_tables(tables)
    assert (await tb.recover())[0] == ErrorCode.NO_CHECKPOINT
    await tb.configure_checkpoints(0)
    assert await tb.commit(0) == NONE
    assert await tb.commit(0) == ErrorCode.BAD_BATCH
    assert await tb.snapshot(1) == ErrorCode.BAD_BATCH
    # A snapshot larger than its slot, empty, or from a misaligned copy is refused;
    # one that reaches past the GPU window already at the doorbell.
    await tb.ctl.write(Reg.MLP_LINES, cfg.snapshot_size)
    await tb.ctl.write(Reg.ERROR, 0)
    submitted = await tb.ctl.read(Reg.SUBMITTED)
    await tb.submit(Op.SNAPSHOT_MLP, 0, n_bags=0, n_indices=0, idx_addr=0, off_addr=0, vec_addr=0)
    assert await tb.ctl.read(Reg.SUBMITTED) == submitted
    assert await tb.ctl.read(Reg.ERROR) == ErrorCode.OUT_OF_WINDOW.value | 1 << 32
    await tb.ctl.write(Reg.GPU_LIMIT, cfg.hdm_base * LINE_BYTES)
    for lines in (cfg.snapshot_size, 0):
        await tb.ctl.write(Reg.MLP_LINES, lines)
        assert await tb.snapshot(0) == ErrorCode.BAD_SIZE, lines
    await tb.set_gpu_window()
    await tb.ctl.write(Reg.MLP_LINES, cfg.mlp_lines)
    await tb.ctl.write(Reg.MLP_ADDR, tb.mlp_line * LINE_BYTES + 8)
    assert await tb.snapshot(0) == ErrorCode.BAD_POINTER
    await tb.ctl.write(Reg.MLP_ADDR, tb.mlp_line * LINE_BYTES)
    batch = SyntheticWorkload(cfg, seed=2, batch_size=4).batch(1)
    deltas = np.ones((batch.n_bags, cfg.dim), np.int32)
    error, _ = await tb.update(1, batch.indices, batch.offsets, deltas)
    assert error == ErrorCode.NOT_LOGGED
    # A coalesced update after a logged lookup of its batch: refused, before any row
    # changes, if it names a single row the lookup did not log. (With K = 0 the lookup
    # waits for batch 0's snapshot.)
    await tb.stage_mlp(np.zeros(cfg.mlp_params, np.float32))
    assert await tb.snapshot(0) == NONE
    await tb.wait_snapshot(0)
    assert (await tb.lookup(1, batch.indices, batch.offsets)).error == NONE
    idx, off, summed = coalesce_update(cfg, batch.indices, batch.offsets, deltas)
    lengths = np.diff(batch.offsets.astype(np.int64))
    table_of = np.repeat(np.arange(batch.n_bags) % cfg.n_tables, lengths)
    stranger = min(set(range(cfg.tables[0])) - set(batch.indices[table_of == 0].tolist()))
    # One more sample: table 0's bag holds a row the lookup did not read, the others none.
    forged = np.concatenate([idx, [stranger]]).astype(np.uint32)
    forged_off = np.concatenate([off, [off[-1] + 1] * cfg.n_tables]).astype(np.uint32)
    forged_deltas = np.concatenate([summed, np.ones((cfg.n_tables, cfg.dim), np.int32)])
    error, _ = await tb.update(1, forged, forged_off, forged_deltas, coalesced=True)
    assert error == ErrorCode.NOT_LOGGED, error
    await assert_tables(tb, tables, "after refused requests")
    # A lookup covers one update, even a refused one: look up again, then update.
    assert (await tb.lookup(1, batch.indices, batch.offsets)).error == NONE
    error, _ = await tb.update(1, idx, off, summed, coalesced=True)
    assert error == NONE, error
    await assert_tables(tb, embedding_update(cfg, tables, batch.indices, batch.offsets, deltas),
                        "after the coalesced update")
    for base in (cfg.log_base, cfg.commit_base, *cfg.snapshot_base):
        for at in (base, base + 1):
            before = (await tb.read_media(at, 1))[0]
            assert await tb.mem.write(cfg.hdm_base + at, 0x5A5A) == S2MNdrOpcode.CmpErr
            assert (await tb.read_media(at, 1))[0] == before, f"protected line {at} changed"
    tb.check_models()


@cocotb.test()
async def test_host_faults_during_update_and_snapshot(dut):
    """A delta line the host poisons in the middle of an UPDATE ends it with
    HOST_POISON, maybe with rows already rewritten; RECOVER rolls them back to
    the last commit and the batch then trains cleanly. A snapshot pull whose
    host read fails leaves the previous snapshot the valid one ("snapshot
    failed"); after a power failure RECOVER returns to that snapshot's batch
    (K = 0), and the next pull works."""
    tb, tables, params0 = await formatted(dut, seed=2, host_model="python")   # it injects faults
    cfg = tb.config
    rng = np.random.default_rng(5)
    batch = SyntheticWorkload(cfg, seed=4, batch_size=4).batch(1)
    assert (await tb.lookup(1, batch.indices, batch.offsets)).error == NONE
    deltas = rng.integers(-2**16, 2**16, size=(batch.n_bags, cfg.dim)).astype(np.int32)
    tb.host.inject("error", "read", line=tb.delta_line + (batch.n_bags - 1) * cfg.lines_per_row)
    error, _ = await tb.update(1, batch.indices, batch.offsets, deltas)
    assert error == ErrorCode.HOST_POISON, error
    rewritten = sum(int((g != w).any(axis=1).sum()) for g, w in zip(await tb.read_tables(), tables))
    dut._log.info("the failed update left %d rows rewritten", rewritten)
    error, d, m, rolled, *_ = await tb.recover()
    assert (error, d, m) == (NONE, 0, 0), (error, d, m)
    await assert_tables(tb, tables, "after the failed update and RECOVER")
    after1 = await train_batch(tb, 1, batch, tables, rng)
    assert await tb.commit(1) == NONE

    params1 = rng.normal(size=cfg.mlp_params).astype(np.float32)
    await tb.stage_mlp(params1)
    tb.host.inject("error", "read", line=tb.mlp_line + cfg.mlp_lines // 2)
    assert await tb.snapshot(1) == NONE              # the pull starts, then fails
    for _ in range(1000):
        state = await tb.checkpoint_state()
        if not state["snapshot_busy"]:
            break
    assert state["snapshot_failed"] and state["snapshot"] == 0, state
    await tb.power_fail()
    await tb.configure_checkpoints(0)
    # With K = 0 batch 1's commit is not durable without its snapshot: RECOVER
    # returns to batch 0, rolling batch 1 back, and training resumes at batch 1.
    error, d, m, *_ = await tb.recover()
    assert (error, d, m) == (NONE, 0, 0), (error, d, m)
    await assert_tables(tb, tables, "after the failed snapshot and a power failure")
    np.testing.assert_array_equal(await tb.read_snapshot(0), params0)
    after1 = await train_batch(tb, 1, batch, tables, rng)
    assert await tb.commit(1) == NONE
    await assert_tables(tb, after1, "batch 1 trained again")
    assert await tb.snapshot(1) == NONE
    await tb.wait_snapshot(1)
    np.testing.assert_array_equal(await tb.read_snapshot(1), params1)
    assert not tb.host.errors, tb.host.errors

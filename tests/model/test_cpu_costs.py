"""The host-pmem CPU's kernels (host/model/cpu_kernels.c): they compute what NumPy
computes, and the microbenchmark times each."""

import ctypes

import numpy as np

from trainingcxl.host.model.cpu_costs import compile_kernels, measure


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def test_the_kernels_compute_what_numpy_does(tmp_path):
    lib = compile_kernels(tmp_path)
    lib.dedup.restype = ctypes.c_int64
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 1 << 40, 5000, dtype=np.uint64)
    keys[::3] = keys[0]
    work, tmp = keys.copy(), np.empty_like(keys)
    assert lib.dedup(_ptr(work), _ptr(tmp), ctypes.c_int64(len(keys))) == len(np.unique(keys))
    assert np.array_equal(work, np.sort(keys))          # four passes: sorted back in place
    table = rng.integers(-100, 100, (50, 16), dtype=np.int32)
    idx = rng.integers(0, 50, 40, dtype=np.uint32)
    offsets = np.array([0, 10, 10, 25, 40], np.uint32)
    out = np.zeros((4, 16), np.int32)
    lib.pool(_ptr(table), _ptr(idx), _ptr(offsets), ctypes.c_int64(4), ctypes.c_int64(16), _ptr(out))
    want = np.stack([table[idx[a:b]].sum(axis=0) for a, b in zip(offsets, offsets[1:])])
    assert np.array_equal(out, want)


def test_the_microbenchmark_times_every_kernel():
    got = measure(indices=20_000, rows=5_000, bags=512, repeats=2)
    assert all(got[k] > 0 for k in ("dedup_ns", "pool_ns", "scatter_ns", "apply_ns"))
    assert got["distinct_rows"] <= 5_000

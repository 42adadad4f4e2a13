"""What the CPU's embedding work costs, measured: a microbenchmark of the host-pmem
baseline's kernels in C (``cpu_kernels.c``, compiled with ``-O3 -march=native``).

For a batch of ``n`` indices of dim ``d`` with ``r`` distinct rows, the CPU of
``host-pmem`` deduplicates the indices (a radix sort of their keys), pools the
rows of each bag (``n * d`` additions), sums each distinct row's gradient
contributions (``n * d`` additions) and applies them (``r * d`` additions).
:func:`measure` times each kernel on one core, on a batch of the scale
ladder's shape whose table fits the caches (the media's traffic is the media
model's), and reports nanoseconds per index or per element; the defaults of
:class:`~trainingcxl.spec.config.HostPmemTiming` are its figures on the machine
docs/ladder.md names (``trainingcxl bench --cpu`` measures them again).
"""

import ctypes
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["measure", "compile_kernels"]

SOURCE = Path(__file__).with_name("cpu_kernels.c")


def compile_kernels(folder):
    """Compile the kernels into ``folder``; returns the loaded library."""
    lib = Path(folder) / "cpu_kernels.so"
    subprocess.run(["gcc", "-O3", "-march=native", "-shared", "-fPIC", "-o", str(lib),
                    str(SOURCE)], check=True)
    return ctypes.CDLL(str(lib))


def _best(fn, repeats):
    """The fastest of ``repeats`` runs of ``fn``, in seconds (the least disturbed)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def measure(*, indices=400_000, rows=100_000, dim=16, bags=16_384, repeats=7, seed=0):
    """Nanoseconds on one core: ``dedup_ns`` per index, ``pool_ns`` per element pooled,
    ``scatter_ns`` per gradient element summed into its row, ``apply_ns`` per row
    element updated."""
    rng = np.random.default_rng(seed)
    keys = (rng.zipf(1.05, indices) % rows).astype(np.uint64)
    offsets = np.concatenate([[0], np.sort(rng.choice(np.arange(1, indices), bags - 1,
                                                       replace=False)), [indices]]).astype(np.uint32)
    table = rng.integers(-2**20, 2**20, (rows, dim), dtype=np.int32)
    grads = rng.integers(-2**10, 2**10, (bags, dim), dtype=np.int32)
    idx = keys.astype(np.uint32)
    bag_of = np.repeat(np.arange(bags, dtype=np.uint32), np.diff(offsets))
    uniq, slot = np.unique(idx, return_inverse=True)
    slot = slot.astype(np.uint32)
    out = np.zeros((bags, dim), np.int32)
    acc = np.zeros((len(uniq), dim), np.int32)
    uniq = uniq.astype(np.uint32)
    with tempfile.TemporaryDirectory(prefix="trainingcxl-cpu-") as tmp:
        lib = compile_kernels(tmp)
        lib.dedup.restype = ctypes.c_int64
        work, tmp_keys = keys.copy(), np.empty_like(keys)

        def dedup():
            work[:] = keys
            lib.dedup(_ptr(work), _ptr(tmp_keys), ctypes.c_int64(indices))

        times = {
            "dedup_ns": _best(dedup, repeats) / indices,
            "pool_ns": _best(lambda: lib.pool(_ptr(table), _ptr(idx), _ptr(offsets),
                                              ctypes.c_int64(bags), ctypes.c_int64(dim),
                                              _ptr(out)), repeats) / (indices * dim),
            "scatter_ns": _best(lambda: lib.scatter(_ptr(grads), _ptr(bag_of), _ptr(slot),
                                                    ctypes.c_int64(indices), ctypes.c_int64(dim),
                                                    _ptr(acc)), repeats) / (indices * dim),
            "apply_ns": _best(lambda: lib.apply(_ptr(table), _ptr(uniq), _ptr(acc),
                                                ctypes.c_int64(len(uniq)), ctypes.c_int64(dim)),
                              repeats) / (len(uniq) * dim),
        }
    return {**{k: 1e9 * v for k, v in times.items()}, "indices": indices,
            "distinct_rows": int(len(uniq)), "dim": dim, "bags": bags}

"""The formal proofs: what each harness proves and to what depth (``sim/formal.py`` runs them)."""

from amaranth.lib import data

from trainingcxl.spec.config import Config, ModelShape, PmemTiming
from ..common.beats import BeatReceiver, BeatSender
from ..common.merge import StreamMerge
from ..common.register_slice import RegisterSlice
from ..cxl.cache_agent import CacheAgent
from ..cxl.mem_target import CxlMemTarget
from ..dispatch import Dispatcher
from ..pmem.controller import PmemController
from .pmem import WpqHarness
from .streams import StreamContract
from .write_ahead import LoggerHarness, dispatcher_write_ahead

__all__ = ["PROOFS", "formal_config"]


def formal_config(registered=False):
    """A configuration small enough to prove over: one table of 4 rows, short
    PMEM latencies and queues, so that a few dozen cycles reach every state.
    ``registered``: the boards' register slices, whose read path is a cycle
    longer (``Config.min_read_latency``). The PMEM controller keeps the volatile
    write-pending queue, the boards' persistence domain (the energy-backed buffer is
    tested in simulation, tests/hdl/test_pmem.py)."""
    return Config(tables=(4,), max_pooling=2, max_bags=4, log_buffer=4, defer_depth=4,
                  cache_ids=4, host_window=2, desc_depth=2, register_slices=registered,
                  pmem=PmemTiming(read_latency=4 + registered, write_latency=4, read_rate=(1, 1),
                                  write_rate=(1, 1), read_depth=4, wpq_depth=4, buffer_lines=0),
                  model=ModelShape(bottom_hidden=(2,), top_hidden=(2,), batch_size=2))


_Small = data.StructLayout({"a": 8, "b": 8})


def _slice():
    return StreamContract(RegisterSlice(_Small))


def _slice_cut_ready():
    return StreamContract(RegisterSlice(_Small, cut_ready=True))


def _beat_sender():
    return StreamContract(BeatSender(width=16, beats=4, meta=4, short=True))


def _beat_receiver():
    return StreamContract(BeatReceiver(width=16, beats=4, meta=4, unload=True))


def _merge():
    return StreamContract(StreamMerge(_Small, 3))


def _merge_late():
    return StreamContract(StreamMerge(_Small, 3, late_mask=True))


def _pmem_streams(registered=False):
    return StreamContract(PmemController(formal_config(registered), n_ports=3, tag_bits=4,
                                         background=(2,)), reset="power_fail")


def _wpq():
    return WpqHarness(formal_config())


def _mem_target(registered=False):
    return StreamContract(CxlMemTarget(formal_config(registered)))


def _cache_agent(registered=False):
    return StreamContract(CacheAgent(formal_config(registered),
                                     n_ports=2, tag_bits=4))


def _dispatcher(registered=False):
    return StreamContract(Dispatcher(formal_config(registered)),
                          properties=dispatcher_write_ahead)


def _logger(registered=False):
    # Two rows: the stamps are scrubbed a row per cycle after reset, and every
    # cycle of that is depth the solver cannot spend on records.
    return LoggerHarness(formal_config(registered).replace(tables=(2,)))


#: name -> (what it proves, harness factory, depth in cycles)
PROOFS = {
    "register-slice": ("RegisterSlice keeps its output stream stable until ready",
                       _slice, 12),
    "register-slice-cut-ready": ("RegisterSlice with ready cut keeps its output stream stable "
                                 "until ready", _slice_cut_ready, 12),
    "stream-merge": ("StreamMerge (3 inputs) keeps its output stable until ready",
                     _merge, 12),
    "stream-merge-late": ("StreamMerge (3 inputs) with the turn moved a cycle late keeps its "
                          "output stable until ready", _merge_late, 12),
    "beat-sender": ("BeatSender (4 beats, short words in one) keeps each beat stable until ready",
                    _beat_sender, 12),
    "beat-receiver": ("BeatReceiver (4 beats, words unloaded again at will) keeps each "
                      "word stable until ready",
                      _beat_receiver, 12),
    "pmem-streams": ("PmemController (3 ports, one in the background): every response "
                     "stream stable until ready, power failures included", _pmem_streams, 8),
    "pmem-wpq": ("the PMEM write-pending queue loses, duplicates and reorders no write "
                 "(no power failure)", _wpq, 8),
    "mem-target-streams": ("CxlMemTarget: NDR, DRS and its PMEM requests stable until ready",
                           _mem_target, 6),
    "cache-agent-streams": ("CacheAgent (2 ports): D2H requests and data, and every "
                            "response to its clients, stable until ready", _cache_agent, 10),
    "dispatcher": ("Dispatcher: streams stable; while logging an UPDATE starts only when "
                   "the undo log is drained and after a clean logged LOOKUP of its batch "
                   "(strict order)", _dispatcher, 12),
    "logger": ("UndoLogger: drained only when every row taken has its undo record "
               "written and acknowledged (persistent)", _logger, 10),
}


def _registered(name, factory):
    what, _, depth = PROOFS[name]
    return (f"{what}; with the boards' register slices", lambda: factory(registered=True), depth)


# The boards' variants (``Config.register_slices``) of the blocks whose
# handshakes and answers that switch registers.
PROOFS.update({f"{name}-registered": _registered(name, factory) for name, factory in (
    ("pmem-streams", _pmem_streams), ("mem-target-streams", _mem_target),
    ("cache-agent-streams", _cache_agent),
    ("dispatcher", _dispatcher), ("logger", _logger))})

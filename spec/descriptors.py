"""Descriptors the control window submits to the engines, and their error codes."""

from amaranth.lib import data, enum

from .config import ADDR_BITS

__all__ = ["Op", "ErrorCode", "OP_MEANINGS", "ERROR_MEANINGS", "descriptor_layout", "NO_TARGET",
           "completion_layout"]


class Op(enum.Enum, shape=4):
    """Descriptor operations (docs/design.md, "Operations"); what each does: :data:`OP_MEANINGS`."""
    NOP = 0
    LOOKUP = 1
    UPDATE = 2
    COMMIT = 3
    SNAPSHOT_MLP = 4
    RECOVER = 5
    FINISH = 6


class ErrorCode(enum.Enum, shape=8):
    """Why a descriptor failed; the value lands in the control window's ERROR register.

    What each code means: :data:`ERROR_MEANINGS`.
    """
    NONE = 0
    BAD_OP = 1
    BAD_SIZE = 2
    BAD_POINTER = 3
    BAD_OFFSETS = 4
    POOLING = 5
    ROW_RANGE = 6
    HOST_POISON = 7
    HOST_WRITE = 8
    QUEUE_FULL = 9
    DEFER_OVERFLOW = 10
    NOT_DEFERRED = 11
    NOT_LOGGED = 12
    NOT_RECOVERED = 13
    BAD_BATCH = 14
    NO_CHECKPOINT = 15
    OUT_OF_WINDOW = 16
    LOG_TOO_SMALL = 17


#: What each operation does (the register map page of the documentation is made from this).
OP_MEANINGS = {
    Op.NOP: "does nothing; completes at once",
    Op.LOOKUP: "gather the rows of every bag of a batch from PMEM, sum-pool them and write the "
               "pooled vectors to host memory; the undo logger records the rows it reads",
    Op.UPDATE: "subtract each bag's delta (read from host memory) from every row of the bag, "
               "wrapping; completes when every write is persistent",
    Op.COMMIT: "persist the commit record of a batch once all its row writes are persistent",
    Op.SNAPSHOT_MLP: "pull the GPU's staged copy of the MLP parameters into the older snapshot "
                     "slot, header last",
    Op.RECOVER: "after a power failure: roll back to the newest durable batch, choose the "
                "snapshot, report both; on a device of a pool, to the batch the descriptor "
                "names if that is older (NO_TARGET: none)",
    Op.FINISH: "add the rows a relaxed LOOKUP deferred (docs/relaxed-lookup.md)",
}

#: What each error code means (the register map page of the documentation is made from this).
ERROR_MEANINGS = {
    ErrorCode.NONE: "no error",
    ErrorCode.BAD_OP: "operation unknown or not implemented",
    ErrorCode.BAD_SIZE: "n_bags is zero or larger than max_bags",
    ErrorCode.BAD_POINTER: "a host pointer is not line aligned",
    ErrorCode.BAD_OFFSETS: "offsets do not start at 0, decrease, or do not end at n_indices",
    ErrorCode.POOLING: "a bag holds more than max_pooling indices",
    ErrorCode.ROW_RANGE: "an index is not a row of its table",
    ErrorCode.HOST_POISON: "host memory answered a read with poisoned data",
    ErrorCode.HOST_WRITE: "host memory refused a write",
    ErrorCode.QUEUE_FULL: "doorbell rung while the descriptor queue was full",
    ErrorCode.DEFER_OVERFLOW: "a relaxed LOOKUP deferred more rows than the device can hold",
    ErrorCode.NOT_DEFERRED: "FINISH of a batch that is not the last clean relaxed LOOKUP",
    ErrorCode.NOT_LOGGED: "UPDATE while logging, of rows no clean LOOKUP (and FINISH) logged",
    ErrorCode.NOT_RECOVERED: "COMMIT or SNAPSHOT_MLP before a RECOVER since power-up",
    ErrorCode.BAD_BATCH: "COMMIT not after the last commit; SNAPSHOT_MLP of an uncommitted batch",
    ErrorCode.NO_CHECKPOINT: "RECOVER found no committed batch with a snapshot: start from scratch",
    ErrorCode.OUT_OF_WINDOW: "an array the descriptor names reaches outside the GPU window",
    ErrorCode.LOG_TOO_SMALL: "a logged LOOKUP or FINISH met an undo ring full of records "
                             "that no commit could free before it ends (its distinct rows "
                             "do not fit)",
}
assert set(OP_MEANINGS) == set(Op) and set(ERROR_MEANINGS) == set(ErrorCode)


#: ``RECOVER``'s batch when it names no batch to roll back to: the newest durable one.
NO_TARGET = 0xFFFF_FFFF


def descriptor_layout(config):
    """One descriptor; pointers are host line addresses (byte address / 64).

    For ``LOOKUP``: bag ``k`` (``k = sample * tables + table``) owns indices
    ``offsets[k] .. offsets[k+1]-1``; ``idx_addr`` holds ``n_indices`` 32-bit
    row numbers, ``off_addr`` holds ``n_bags + 1`` 32-bit offsets, and the
    pooled vector of bag ``k`` goes to ``vec_addr + k * lines_per_row``.

    ``checked`` is set by the device, never by the host: the batch's offsets
    and indices already passed every check in a ``LOOKUP`` of the same batch.
    ``relaxed`` (``LOOKUP`` only) defers the rows the previous batch's update
    will change; ``FINISH`` adds them once that update is done. ``nolog``
    (``LOOKUP`` only) keeps the rows it reads out of the undo log: a system
    that logs in a pass of its own (``cxl-d``, ``near-data``) pools without
    logging, then repeats the ``LOOKUP`` with logging before the update.
    ``coalesced`` (``UPDATE`` only): the batch's rows, each once, one per bag
    with its summed delta (:func:`trainingcxl.host.model.golden.coalesce_update`),
    instead of the lookup's bags; the rows are then read and written once each.
    """
    return data.StructLayout({
        "op": Op,
        "batch": 32,
        "n_bags": 24,
        "n_indices": 32,
        "idx_addr": ADDR_BITS,
        "off_addr": ADDR_BITS,
        "vec_addr": ADDR_BITS,
        "checked": 1,
        "relaxed": 1,
        "nolog": 1,
        "coalesced": 1,
    })


completion_layout = data.StructLayout({
    "batch": 32,
    "op": Op,
    "error": ErrorCode,
})

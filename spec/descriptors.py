"""Descriptors the control window submits to the engines, and their error codes."""

from amaranth.lib import data, enum

from .config import ADDR_BITS

__all__ = ["Op", "ErrorCode", "descriptor_layout", "completion_layout"]


class Op(enum.Enum, shape=4):
    """Descriptor operations (DESIGN section 5)."""
    NOP = 0
    LOOKUP = 1
    UPDATE = 2
    COMMIT = 3
    SNAPSHOT_MLP = 4
    RECOVER = 5
    FINISH = 6              # add the rows a relaxed LOOKUP deferred (docs/relaxed-lookup.md)


class ErrorCode(enum.Enum, shape=8):
    """Why a descriptor failed; the value lands in the control window's ERROR register."""
    NONE = 0
    BAD_OP = 1              # operation unknown or not implemented
    BAD_SIZE = 2            # n_bags is zero or larger than max_bags
    BAD_POINTER = 3         # a host pointer is not line aligned
    BAD_OFFSETS = 4         # offsets do not start at 0, decrease, or do not end at n_indices
    POOLING = 5             # a bag holds more than max_pooling indices
    ROW_RANGE = 6           # an index is not a row of its table
    HOST_POISON = 7         # host memory answered a read with poisoned data
    HOST_WRITE = 8          # host memory refused a write
    QUEUE_FULL = 9          # doorbell rung while the descriptor queue was full
    DEFER_OVERFLOW = 10     # a relaxed LOOKUP deferred more rows than the device can hold
    NOT_DEFERRED = 11       # FINISH of a batch that is not the last clean relaxed LOOKUP
    NOT_LOGGED = 12         # UPDATE while logging, of rows no clean LOOKUP (and FINISH) logged
    NOT_RECOVERED = 13      # COMMIT or SNAPSHOT_MLP before a RECOVER since power-up
    BAD_BATCH = 14          # COMMIT not after the last commit; SNAPSHOT_MLP of an uncommitted batch
    NO_CHECKPOINT = 15      # RECOVER found no committed batch with a snapshot: start from scratch
    OUT_OF_WINDOW = 16      # an array the descriptor names reaches outside the GPU window
    LOG_TOO_SMALL = 17      # a logged LOOKUP may need more undo records than the ring holds


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

"""The phases of a training run's host, where planned power failures strike."""

__all__ = ["PHASES", "BATCH_PHASES", "BOARD_PHASES"]

#: The host's phases, as failures report them. ``snapshot`` is the host staging
#: the MLP and, with K = 0, waiting for the pull; ``check`` is the golden
#: comparison of the tables; ``recovery`` is ``RECOVER`` after a failure.
PHASES = ("lookup", "gpu", "log", "update", "commit", "snapshot", "check", "recovery")
#: The phases of every batch in every system (``log`` is only in those with a logging pass).
BATCH_PHASES = ("lookup", "gpu", "update", "commit", "snapshot")
#: Where a planned failure can hit on a board: just after this descriptor of the batch
#: is submitted.
BOARD_PHASES = ("lookup", "update", "commit", "snapshot")

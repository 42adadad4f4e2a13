"""Output paths checked before a command builds or simulates anything: a run of
minutes must not end in a traceback because its ``--json`` cannot be written.

A file output gets its parent folder created and a probe file written there; a
folder output must be a folder (or creatable: its nearest existing ancestor is
probed, nothing is created, so that a default such as ``campaign-failures`` stays
absent until it is needed)."""

import os
from pathlib import Path

__all__ = ["OutputError", "FILE_OPTIONS", "FOLDER_OPTIONS", "check_file", "check_folder",
           "check_outputs"]

#: Options (argparse ``dest``) naming a file a command writes.
FILE_OPTIONS = ("json", "plot", "waves", "journal", "output", "pmem")
#: Options naming a folder a command writes into.
FOLDER_OPTIONS = ("export", "dump", "out", "reproducers")


class OutputError(ValueError):
    """An output path that cannot be written; the message says why."""


def _probe(folder):
    """Write and remove a file in ``folder``: permissions alone miss read-only mounts,
    and say nothing for root."""
    probe = Path(folder) / f".trainingcxl-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise OutputError(f"cannot write in {folder}: {e.strerror or e}") from None


def _existing_ancestor(path):
    """The nearest ancestor of ``path`` that exists; it must be a folder."""
    for parent in Path(path).absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"{parent} is a file, not a folder")
            return parent
    return Path("/")


def check_file(path):
    """``path`` can be written as a file: its parent exists (created now) and takes a
    new file; an existing file there is writable."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{path} is a folder")
    _existing_ancestor(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create {path.parent}: {e.strerror or e}") from None
    _probe(path.parent)
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"{path} is read-only")


def check_folder(path):
    """Files can be written into folder ``path`` (it exists, or could be created)."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise OutputError(f"{path} is a file, not a folder")
        _probe(path)
    else:
        _probe(_existing_ancestor(path))


def check_outputs(args):
    """Check every output option ``args`` carries; ``SystemExit`` with one line naming the
    option and the reason at the first that cannot be written."""
    for names, check in ((FILE_OPTIONS, check_file), (FOLDER_OPTIONS, check_folder)):
        for name in names:
            value = getattr(args, name, None)
            if isinstance(value, (str, os.PathLike)) and value:
                try:
                    check(value)
                except OutputError as e:
                    raise SystemExit(f"error: --{name} {value}: {e}") from None

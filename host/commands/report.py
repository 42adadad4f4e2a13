"""The readable summary every command prints after its run: one labelled line per
fact, in one column, and the lines that recur (the golden model's verdict, where
the JSON went)."""

import sys
import tempfile

from trainingcxl.host.protocol.run_record import Record
from trainingcxl.host.tools.argtypes import plural, write_json
from trainingcxl.host.tools.provenance import provenance

__all__ = ["line", "golden", "json_out", "error", "plural"]

#: Width of a summary line's label.
LABEL = 19


def line(label, text, say=print):
    """``  label              text``, through ``say`` (default: print)."""
    say(f"  {label:<{LABEL - 1}} {text}")


def golden(match, what=""):
    """The golden model's verdict, and what was compared."""
    line("golden model", ("bit-exact" if match else "MISMATCH") + (f": {what}" if what else ""))


def json_out(path, record, note="", say=print, *, args=None):
    """Write ``record`` to ``path`` (if given) atomically, with the provenance record of
    the command run with ``args``, and say so. A write that fails now (the path was
    checked before the run) keeps the results in a temporary file and says where, in
    one line; returns whether ``path`` was written."""
    if not path:
        return True
    # A typed record (:class:`~trainingcxl.host.protocol.run_record.Record`) as its JSON; a
    # command's own summary is JSON data already.
    data = record.to_dict() if isinstance(record, Record) else record
    if isinstance(data, dict) and "provenance" not in data:
        job = getattr(record, "job", None) if isinstance(record, Record) else data.get("job")
        data = {**data, "provenance": provenance(args if args is not None else _Bare(), job=job)}
    record = data
    try:
        write_json(path, record)
    except OSError as e:
        fd, kept = tempfile.mkstemp(prefix="trainingcxl-", suffix=".json")
        with open(fd, "w"):
            pass
        write_json(kept, record)
        error(f"could not write {path} ({e.strerror or e}); the results are kept in {kept}")
        return False
    line("JSON", f"{path}{f' ({note})' if note else ''}", say)
    return True


class _Bare:
    """The namespace of a caller that gave no arguments: the provenance record names
    what it can (``sys.argv``, versions, time) without seeds or configuration."""


def error(text):
    """An error line on stderr."""
    print(f"error: {text}", file=sys.stderr)

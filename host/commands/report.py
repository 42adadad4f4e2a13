"""The readable summary every command prints after its run: one labelled line per
fact, in one column, and the lines that recur (the golden model's verdict, where
the JSON went)."""

import sys

from trainingcxl.host.tools.argtypes import write_json

__all__ = ["line", "golden", "json_out", "error"]

#: Width of a summary line's label.
LABEL = 19


def line(label, text, say=print):
    """``  label              text``, through ``say`` (default: print)."""
    say(f"  {label:<{LABEL - 1}} {text}")


def golden(match, what=""):
    """The golden model's verdict, and what was compared."""
    line("golden model", ("bit-exact" if match else "MISMATCH") + (f": {what}" if what else ""))


def json_out(path, record, note="", say=print):
    """Write ``record`` to ``path`` (if given) atomically and say so."""
    if path:
        write_json(path, record)
        line("JSON", f"{path}{f' ({note})' if note else ''}", say)


def error(text):
    """An error line on stderr."""
    print(f"error: {text}", file=sys.stderr)

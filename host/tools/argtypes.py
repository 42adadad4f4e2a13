"""Small helpers the command-line modules share: argument types, atomic JSON and figure output."""

import argparse
import json
from pathlib import Path

__all__ = ["plural", "nonneg", "positive", "fraction", "share", "name_value", "write_json",
           "save_figure", "DOC_FONTS", "add_set_option", "with_overrides", "DefaultsHelpFormatter",
           "OneLineErrors"]


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Help that names each option's default from the option itself, so that a
    default is written once: where the option is declared. Help that already says
    what its default is (a default decided later, such as "the system's") is kept."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if ("(default" in text or not action.option_strings or default is None
                or default is False or default == [] or default is argparse.SUPPRESS):
            return text
        if isinstance(default, (list, tuple)):
            default = ",".join(map(str, default))
        return f"{text} (default: {str(default).replace('%', '%%')})"


def plural(n, noun, many=None):
    """``1 power failure``, ``3 power failures`` (``many``: an irregular plural)."""
    return f"{n:,} {noun if n == 1 else many or noun + 's'}"


def nonneg(text):
    """argparse type: an integer >= 0, with a message that says what is wrong."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{v} must not be negative")
    return v


def positive(text):
    """argparse type: an integer >= 1."""
    v = nonneg(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be at least 1")
    return v


def positive_float(text):
    """argparse type: a number > 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{v} must be greater than 0")
    return v


def fraction(text):
    """argparse type: a number strictly between 0 and 1."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"{v} must lie strictly between 0 and 1")
    return v


def share(text):
    """argparse type: a share of a whole, a number in (0, 1]."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"{v} must lie in (0, 1]")
    return v


def name_value(text):
    """argparse type: ``NAME=VALUE``, as a pair of non-empty strings."""
    name, eq, value = text.partition("=")
    if not name or not eq or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _json_default(value):
    """JSON of what ``json`` does not know: a typed record as its dict (one kept in a
    command's summary), anything else as its text."""
    return value.to_dict() if hasattr(value, "to_dict") else str(value)


def write_json(path, record):
    """Write ``record`` atomically: the file is either complete or untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=_json_default) + "\n")
    tmp.replace(path)


#: Text sizes of the figures the docs show: readable where a figure 11-16 inches wide is
#: drawn at the width of the docs' column.
DOC_FONTS = {"font.size": 15, "axes.titlesize": 16, "legend.fontsize": 15, "figure.titlesize": 17}


def save_figure(fig, path):
    """Save a matplotlib figure atomically (complete or untouched), then close it."""
    import matplotlib.pyplot as plt
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


def add_set_option(sp):
    """``--set GROUP.FIELD=VALUE``: change one configuration field (repeatable)."""
    sp.add_argument("--set", action="append", default=[], metavar="[GROUP.]FIELD=VALUE",
                    help="change a configuration field, e.g. host_pmem.cores=6 or "
                         "pmem.read_latency=80 (repeatable; `trainingcxl config` lists them)")


def with_overrides(config, assignments):
    """``config`` with the ``--set`` assignments applied; a bad one exits with its message."""
    from trainingcxl.spec.config import ConfigError
    try:
        return config.with_overrides(assignments)
    except ConfigError as e:
        raise SystemExit(f"error: --set: {e}") from None


class OneLineErrors(argparse.ArgumentParser):
    """A parser whose errors are one line and a hint, not the whole usage: the
    mistake stays on screen, and ``--help`` is one command away."""

    def error(self, message):
        what = "the commands" if " " not in self.prog else "the options"
        self.exit(2, f"{self.prog}: error: {message}\n"
                     f"hint: `{self.prog} --help` lists {what}\n")

"""The finished tasks of a long fan-out, kept on disk so that an interrupted
campaign or sweep resumes where it stopped (``--resume``).

A journal is a JSON-lines file: a header naming the command and a digest of
its task list, then one line per finished task (its index, record and error),
flushed and synced as it finishes. Resuming re-creates the task list from the
same command line, checks that its digest is the header's (a journal of other
tasks is refused, not mixed in), takes the tasks it holds as done and runs the
rest. A line cut short by the interruption is dropped (that task runs again);
a task is counted once however often it appears.
"""

import hashlib
import json
import os
from pathlib import Path

__all__ = ["Journal", "task_digest", "default_journal"]


def task_digest(kind, specs):
    """What identifies a fan-out: its command and every task's arguments."""
    text = json.dumps({"kind": kind, "tasks": specs}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_journal(kind, digest):
    """``<cache>/journals/<kind>-<digest>.jsonl``: the same command finds it again."""
    from trainingcxl.sim.runner import repo_cache
    return repo_cache() / "journals" / f"{kind}-{digest}.jsonl"


class Journal:
    """Results of the tasks of one fan-out, by task index.

    ``resume=False`` starts the file anew; ``resume=True`` reads what it holds
    (a missing file is an empty journal) and raises ``ValueError`` if it was
    written for other tasks."""

    def __init__(self, path, kind, digest, *, resume):
        self.path = Path(path)
        self.kind, self.digest = kind, digest
        self._done = {}
        header = {"journal": kind, "digest": digest}
        if resume and self.path.exists():
            lines = self.path.read_text().splitlines()
            try:
                found = json.loads(lines[0]) if lines else None
            except json.JSONDecodeError:
                found = None
            if found != header:
                raise ValueError(f"{self.path} is not the journal of this {kind} (other "
                                 f"arguments or another command); leave out --resume to start "
                                 f"anew, or name the right file with --journal")
            for line in lines[1:]:
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    break                       # cut short by the interruption: run it again
                self._done[entry["index"]] = (entry["record"], entry["error"])
            # Rewrite without a torn tail, so that new lines start on a line of their own.
            self._write([header, *({"index": i, "record": r, "error": e}
                                   for i, (r, e) in sorted(self._done.items()))])
        else:
            self._write([header])
        self._file = open(self.path, "a")

    def _write(self, entries):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(json.dumps(e) + "\n" for e in entries))
        tmp.replace(self.path)

    def results(self):
        """``{task index: (record, error)}`` of the tasks already done."""
        return dict(self._done)

    def add(self, index, record, error):
        """Record a finished task, durably, before anything counts it."""
        if index in self._done:
            return
        self._done[index] = (record, error)
        self._file.write(json.dumps({"index": index, "record": record, "error": error}) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

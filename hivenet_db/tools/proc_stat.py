"""The fields of /proc/<pid>/stat (Linux): the embedded server's process checks and the
benchmarks' CPU meters read them here."""

from __future__ import annotations

import os
from pathlib import Path


def stat(pid: int | str) -> list[str]:
    """The fields after "pid (comm)" (comm may hold spaces): state, ppid, ...; utime and stime
    are 11 and 12, the reaped children's 13 and 14. An empty list when the process is
    gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def cpu_seconds(pid: int | str, reaped_children: bool = False) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (with ``reaped_children``, also of
    its children it has waited for); None when the process is gone or unreadable."""
    fields = stat(pid)
    if not fields:
        return None
    return sum(int(x) for x in fields[11:15 if reaped_children else 13]) / os.sysconf(
        "SC_CLK_TCK")

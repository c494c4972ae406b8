"""``--markdown FILE``: a run's results as a Markdown section (machine, date, settings, every
case with its baseline of the same run), put at the top of FILE's sections, newest first, so
that ``hivenet-db bench --markdown docs/benchmarks.md`` records a run where readers look."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path

from hivenet_db.bench import Result, hide_password

TITLE = "# Benchmarks"


def first_line(command: Sequence[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return "not found"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) \
        else "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB RAM"
    except OSError:
        pass
    return "RAM unknown"


def _system() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


def machine(versions: str) -> str:
    """One line: CPUs, memory, system, the programs' versions (the server's, pgbench's), the
    load average now (the run's end)."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{os.cpu_count()} CPUs, {_memory()}, {_system()}, {versions}; "
            f"load average at the end {load}")


def section(results: Sequence[Result], *, command: str, settings: str, versions: str,
            when: dt.datetime | None = None) -> str:
    """The Markdown section of one run."""
    when = when or dt.datetime.now(dt.UTC)
    lines = [f"## Run of {when:%Y-%m-%d %H:%M} UTC (`hivenet-db bench --markdown`)", "",
             f"- Command: `{hide_password(command)}`",
             f"- Machine: {machine(versions)}",
             f"- Settings: {settings}", "",
             "| case | unit | baseline (median) | candidate (median) | ratio | cpu ratio | "
             "what is compared |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        cpu = "—" if r.cpu_ratio is None else f"{r.cpu_ratio:.3f}"
        lines.append(f"| `{r.scenario}` | {r.unit} | {r.baseline_median:,.1f} | "
                     f"{r.candidate_median:,.1f} | {r.ratio:.3f} | {cpu} | "
                     f"{r.description.replace('|', '/')} |")
    lines += ["", "Ratios are candidate / baseline of the medians over the rounds, measured in "
              "the same run, rounds alternating; the cpu ratio is baseline CPU / candidate CPU "
              "per transaction (the runner's own server only).", ""]
    return "\n".join(lines)


def record(path: Path, text: str) -> None:
    """Put section ``text`` before the first section of the file at ``path`` (made if new)."""
    old = path.read_text() if path.exists() else f"{TITLE}\n\n"
    lines = old.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.startswith("## ")), len(lines))
    head = "".join(lines[:at])
    path.write_text(head + ("" if head.endswith("\n\n") else "\n") + text + "\n"
                    + "".join(lines[at:]))

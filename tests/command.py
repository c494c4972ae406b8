"""Running the ``hivenet-db`` command from a test.

``in_process`` runs the command's ``main`` in the test's own process, with stdout and stderr
captured as a pipe would take them (not a terminal: no colours, no progress bar) and the exit
status ``main`` returns, or argparse exits with: what a test of a command's behaviour needs,
without the 0.5 to 0.8 s of CPU a new interpreter spends importing SQLAlchemy, psycopg and
alembic. Not from two threads at once: stdout and stderr are the process's.

``as_process`` runs the installed console script: for what only a real process shows (the
entry point itself, a terminal, output streamed through a pipe, commands running at once).

Both leave out ``HIVENET_DATABASE_URL`` unless ``env`` sets it, so a command without
``--url`` means the embedded server, as on a machine without that variable.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import chdir, contextmanager, nullcontext, redirect_stderr, redirect_stdout
from pathlib import Path

from hivenet_db import cli

COMMAND = Path(sys.executable).with_name("hivenet-db")
URL_VARIABLE = "HIVENET_DATABASE_URL"

Result = subprocess.CompletedProcess[str]


def as_process(*args: str, env: dict[str, str] | None = None) -> Result:
    base = {k: v for k, v in os.environ.items() if k != URL_VARIABLE}
    return subprocess.run([str(COMMAND), *args], capture_output=True, text=True,
                          env={**base, **(env or {})}, timeout=180, check=False)


@contextmanager
def _environment(env: dict[str, str] | None) -> Iterator[None]:
    """``os.environ`` without URL_VARIABLE and with ``env``, restored afterwards."""
    saved = dict(os.environ)
    os.environ.pop(URL_VARIABLE, None)
    os.environ.update(env or {})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def in_process(*args: str, env: dict[str, str] | None = None,
               cwd: Path | None = None) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with _environment(env), chdir(cwd) if cwd else nullcontext(), redirect_stdout(out), \
            redirect_stderr(err):
        try:
            status = cli.main(list(args))
        except SystemExit as exit_:  # argparse: a usage mistake, --help
            status = _exit_status(exit_.code, err)
    return subprocess.CompletedProcess([str(COMMAND), *args], status, out.getvalue(),
                                       err.getvalue())


def _exit_status(code: object, err: io.StringIO) -> int:
    """The status ``sys.exit(code)`` gives a process (a message: printed, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=err)
    return 1

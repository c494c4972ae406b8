"""Command ``bench``: everything after its name goes to the benchmark runner
(``hivenet_db.bench``)."""

from __future__ import annotations

import argparse

from hivenet_db.cli.output import Output


def cmd_bench(args: argparse.Namespace, out: Output) -> int:
    from hivenet_db import bench  # the package's own subpackage; imported only when used

    if args.url and "--url" not in args.bench_args:  # `hivenet-db --url X bench`: run on X
        args.bench_args += ["--url", args.url]
    if out.as_json and "--json" not in args.bench_args:  # `bench --json` went to our parser
        args.bench_args.append("--json")
    return int(bench.main(list(args.bench_args)))



def split_argv(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """Everything after the ``bench`` command is the runner's (argparse's REMAINDER would
    take ``bench --list`` for an option of ours)."""
    for i, arg in enumerate(argv):
        if arg == "bench" and (i == 0 or argv[i - 1] != "--url"):
            return argv[:i + 1], argv[i + 1:]
        if not arg.startswith("-") and (i == 0 or argv[i - 1] != "--url"):
            break  # another command
    return argv, None

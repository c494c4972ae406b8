"""The benchmark runner (hivenet_db/bench/): scenario folders, pgbench output, a real run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hivenet_db import bench
from hivenet_db.tools.embedded_postgres import find_bin_dir

SCENARIOS = Path(__file__).resolve().parents[1] / "hivenet_db" / "bench" / "scenarios"


def make_scenario(root: Path, name: str, params: dict[str, object] | None = None,
                  setup: str | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "baseline.sql").write_text("SELECT 1;\n")
    (folder / "candidate.sql").write_text("SELECT hivenet.now();\n")
    if params is not None:
        (folder / "params.json").write_text(json.dumps(params))
    if setup is not None:
        (folder / "setup.sql").write_text(setup)
    return folder


def test_discover_reads_folders_and_params(tmp_path: Path) -> None:
    make_scenario(tmp_path, "b_two", {"clients": 4, "seconds": 2, "description": "two"})
    make_scenario(tmp_path, "a_one")
    (tmp_path / "_shared").mkdir()  # helper folders are not scenarios
    found = bench.discover(tmp_path)
    assert list(found) == ["a_one", "b_two"]
    assert (found["a_one"].clients, found["a_one"].seconds) == (16, 10)
    assert (found["b_two"].clients, found["b_two"].seconds, found["b_two"].description) == \
        (4, 2, "two")
    assert found["a_one"].setup is None


@pytest.mark.parametrize("params", [{"clients": 0}, {"seconds": "10"}, {"colour": "red"},
                                    {"quick": "no"}])
def test_bad_params_are_named(tmp_path: Path, params: dict[str, object]) -> None:
    make_scenario(tmp_path, "bad", params)
    with pytest.raises(bench.BenchError, match="scenario bad"):
        bench.discover(tmp_path)


def test_missing_script_is_named(tmp_path: Path) -> None:
    (make_scenario(tmp_path, "half") / "candidate.sql").unlink()
    with pytest.raises(bench.BenchError, match=r"half: .*candidate\.sql is missing"):
        bench.discover(tmp_path)


def test_parse_tps() -> None:
    out = ("number of failed transactions: 0 (0.000%)\nlatency average = 0.3 ms\n"
           "tps = 1234.567 (without initial connection time)\n")
    assert bench.parse_tps(out) == 1234.567
    with pytest.raises(bench.BenchError, match="2 failed"):
        bench.parse_tps(out.replace("transactions: 0", "transactions: 2"))
    with pytest.raises(bench.BenchError, match="no tps"):
        bench.parse_tps("pgbench: error")


def test_ratio_is_of_medians() -> None:
    r = bench.Result("s", "", 1, 1, baseline_tps=[100.0, 300.0, 200.0],
                     candidate_tps=[50.0, 150.0, 500.0])
    assert (r.baseline_median, r.candidate_median, r.ratio) == (200.0, 150.0, 0.75)
    table = bench.format_table([r])
    assert "200.0" in table and "0.750" in table


def test_unknown_scenario_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_scenario(tmp_path, "only")
    assert bench.main(["--scenarios-dir", str(tmp_path), "--scenario", "nope"]) == 2
    assert "unknown scenario nope" in capsys.readouterr().err


def test_run_against_a_url(tmp_path: Path, hivenet_url: str,
                           capsys: pytest.CaptureFixture[str]) -> None:
    make_scenario(tmp_path, "tiny", {"clients": 2, "seconds": 1},
                  setup="CREATE TABLE IF NOT EXISTS bench_probe (x int);\n")
    code = bench.main(["--scenarios-dir", str(tmp_path), "--url", hivenet_url,
                       "--rounds", "1", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    (result,) = json.loads(out.out)
    assert result["scenario"] == "tiny" and result["clients"] == 2
    assert result["baseline_median"] > 0 and result["candidate_median"] > 0
    assert "tiny round 1/1 baseline" in out.err


def test_a_run_is_recorded_as_markdown_newest_first(tmp_path: Path, hivenet_url: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    scenarios = tmp_path / "scenarios"
    make_scenario(scenarios, "tiny", {"clients": 2, "seconds": 1, "description": "a | b"})
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nWhat this file is.\n\n## An older run\n\nold\n")
    code = bench.main(["--scenarios-dir", str(scenarios), "--url", hivenet_url,
                       "--rounds", "1", "--markdown", str(doc)])
    assert code == 0, capsys.readouterr().err
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nWhat this file is.\n\n## Run of ")
    assert text.index("## Run of ") < text.index("## An older run")
    (row,) = [line for line in text.splitlines() if line.startswith("| `tiny` |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "tps" and float(cells[4]) > 0 and cells[6] == "a / b"
    assert "--rounds 1 --markdown" in text and "PostgreSQL 1" in text and "CPUs" in text
    assert "the given database (--url)" in text


def test_the_record_names_the_pgbench_that_ran(tmp_path: Path, hivenet_url: str,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Another pgbench first on PATH (another PostgreSQL's client): the runner uses the one
    # beside the server binaries (HIVENET_PG_BINDIR, a PostgreSQL 18 say), and so must the
    # record's machine line.
    other = tmp_path / "bin"
    other.mkdir()
    (other / "pgbench").write_text("#!/bin/sh\necho 'pgbench (PostgreSQL) 0.0 other'\n")
    (other / "pgbench").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}:{os.environ['PATH']}")
    scenarios = tmp_path / "scenarios"
    make_scenario(scenarios, "tiny", {"clients": 1, "seconds": 1})
    doc = tmp_path / "benchmarks.md"
    code = bench.main(["--scenarios-dir", str(scenarios), "--url", hivenet_url,
                       "--rounds", "1", "--markdown", str(doc)])
    assert code == 0, capsys.readouterr().err
    ran = subprocess.run([str(find_bin_dir() / "pgbench"), "--version"],
                         capture_output=True, text=True, check=True).stdout.strip()
    (line,) = [x for x in doc.read_text().splitlines() if x.startswith("- Machine: ")]
    assert ran in line and "0.0 other" not in line


def test_every_shipped_scenario_runs(hivenet_url: str) -> None:
    """Setup and both scripts of every scenario in hivenet_db/bench/scenarios run (3
    transactions)."""
    assert bench.main(["--scenarios-dir", str(SCENARIOS), "--url", hivenet_url,
                       "--check"]) == 0


def test_cpu_ratio_is_of_medians() -> None:
    r = bench.Result("s", "", 1, 1, [1.0], [1.0], baseline_cpu_us=[40.0, 50.0, 60.0],
                     candidate_cpu_us=[100.0, 90.0, 80.0])
    assert r.cpu_ratio == 50.0 / 90.0
    assert bench.Result("s", "", 1, 1, [1.0], [1.0]).cpu_ratio is None


def test_cpu_per_transaction_of_a_local_server(hivenet_server: object, hivenet_url: str,
                                               tmp_path: Path) -> None:
    meter = bench.CpuMeter(hivenet_server.data_dir)  # type: ignore[attr-defined]
    script = tmp_path / "work.sql"
    script.write_text("SELECT count(*) FROM generate_series(1, 20000);\n")
    tps, cpu = bench.pgbench(hivenet_url, script, clients=2, transactions=100, meter=meter)
    assert tps > 0 and cpu is not None and cpu > 0
    assert bench.pgbench(hivenet_url, script, clients=1, transactions=1)[1] is None


def test_the_shipped_scenarios_are_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Found from any directory (package data, so also from an installed wheel)."""
    monkeypatch.chdir(tmp_path)
    assert bench.default_scenarios_dir() == SCENARIOS
    assert bench.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert "alloc_formatted" in listed and "python_next_unified" in listed


def test_the_cli_passes_options_to_the_runner(capsys: pytest.CaptureFixture[str]) -> None:
    from hivenet_db import cli

    assert cli.main(["bench", "--list"]) == 0
    assert "alloc_nextval" in capsys.readouterr().out


def test_no_password_is_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_scenario(tmp_path, "tiny")
    url = "postgresql://someone:s3cret-pw@127.0.0.1:1/nowhere"
    code = bench.main(["--scenarios-dir", str(tmp_path), "--url", url, "--quick"])
    out = capsys.readouterr()
    assert code != 0 and "s3cret-pw" not in out.err + out.out
    assert bench.hide_password(f"psql -d {url} failed") == \
        "psql -d postgresql://someone:***@127.0.0.1:1/nowhere failed"


def test_quick_run_and_python_layer(tmp_path: Path, hivenet_url: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    make_scenario(tmp_path, "tiny", {"clients": 2, "seconds": 5})
    code = bench.main(["--scenarios-dir", str(tmp_path), "--url", hivenet_url, "--quick",
                       "--seconds", "1", "--python", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    tiny, python = json.loads(out.out)
    assert tiny["seconds"] == 1 and tiny["clients"] == 8 and len(tiny["baseline_tps"]) == 1
    assert python["scenario"] == "python_next_unified" and python["candidate_median"] > 0
    assert "[1/2" in out.err and "[2/2" in out.err and "us/call" in out.err


def test_quick_leaves_out_long_setups_unless_named(tmp_path: Path, hivenet_url: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    make_scenario(tmp_path, "short")
    make_scenario(tmp_path, "long", {"quick": False})
    assert bench.main(["--scenarios-dir", str(tmp_path), "--url", hivenet_url, "--quick",
                       "--json"]) == 0
    assert [r["scenario"] for r in json.loads(capsys.readouterr().out)] == ["short"]
    assert bench.main(["--scenarios-dir", str(tmp_path), "--url", hivenet_url, "--quick",
                       "--scenario", "long", "--json"]) == 0
    assert [r["scenario"] for r in json.loads(capsys.readouterr().out)] == ["long"]


def test_the_cases_are_listed_and_can_be_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--list"]) == 0
    listed = capsys.readouterr().out
    for name in ("serials_vs_redis", "partition_drop", "first_use", "prepare_scopes",
                 "python_next_unified", "requests_vs_handwritten", "alloc_1k_scopes",
                 "alloc_10k_scopes", "dedup_interface_10m"):
        assert name in listed


def test_own_redis_has_no_persistence_and_is_stopped_by_its_pid() -> None:
    """The server of redis-tools (.ci/run installs it): loopback, a port of its own, nothing
    saved, gone afterwards."""
    import socket

    from hivenet_db.bench import cases

    said: list[str] = []
    with cases.own_redis(said.append) as (port, proc):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"CONFIG GET save\r\nCONFIG GET appendonly\r\n")
            time_left = 50
            reply = b""
            while reply.count(b"\r\n") < 10 and time_left:
                reply += s.recv(4096)
                time_left -= 1
        assert b"$4\r\nsave\r\n$0\r\n" in reply and b"appendonly\r\n$2\r\nno" in reply
        assert Path(f"/proc/{proc.pid}").exists()
    assert proc.returncode is not None and not Path(f"/proc/{proc.pid}").exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert f"pid {proc.pid}" in said[0]


def test_the_cases_run_quick(hivenet_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = bench.main(["--url", hivenet_url, "--quick", "--seconds", "1", "--json",
                       "--scenario", "serials_vs_redis", "--scenario", "partition_drop",
                       "--scenario", "first_use", "--scenario", "prepare_scopes"])
    out = capsys.readouterr()
    assert code == 0, out.err
    redis, drop, first, prepare = json.loads(out.out)
    assert (redis["scenario"], redis["unit"]) == ("serials_vs_redis", "serials/s")
    assert redis["baseline_median"] > 0 and redis["candidate_median"] > 1000
    assert drop["scenario"] == "partition_drop" and drop["ratio"] > 0
    assert first["scenario"] == "first_use" and first["candidate_median"] > 0
    assert prepare["scenario"] == "prepare_scopes" and prepare["candidate_median"] > 0
    assert "ms per call" in out.err and "100,000 rows" in out.err and "s for 1,000" in out.err
    assert "started Redis on 127.0.0.1:" in out.err


def test_a_missing_redis_is_named(
        monkeypatch: pytest.MonkeyPatch, hivenet_url: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    from hivenet_db.bench import cases

    monkeypatch.setattr(cases, "redis_server", lambda: None)
    assert bench.main(["--url", hivenet_url, "--scenario", "serials_vs_redis"]) == 1
    assert "redis-tools" in capsys.readouterr().err


def test_a_default_run_without_redis_skips_that_case_and_says_so(
        monkeypatch: pytest.MonkeyPatch, hivenet_url: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    from hivenet_db.bench import cases

    monkeypatch.setattr(cases, "redis_server", lambda: None)
    monkeypatch.setattr(bench, "discover", lambda root: {})  # the cases only, checked
    assert bench.main(["--url", hivenet_url, "--check"]) == 0
    err = capsys.readouterr().err
    assert "skipping serials_vs_redis: redis-server or redis-benchmark not found" in err


def test_requests_against_the_handwritten_way(hivenet_url: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Both sides of ``requests_vs_handwritten`` do the checks they claim (a repeat gets the
    first response, another request under the key is refused), and the case runs quick."""
    import psycopg

    from hivenet_db.bench import handwritten_keys as keys
    from hivenet_db.errors import RequestMismatch

    with psycopg.connect(hivenet_url, autocommit=True) as conn:
        conn.execute(keys._TABLE)
        for call, mismatch in ((keys.handwritten, keys.Mismatch),
                               (keys.repository, RequestMismatch)):
            key = f"k-{call.__name__}"
            assert call(conn, key, keys.REQUEST, {"n": 1}) == {"n": 1}
            assert call(conn, key, keys.REQUEST, {"n": 2}) == {"n": 1}  # the first one's
            with pytest.raises(mismatch):
                call(conn, key, {"other": True}, {"n": 3})
    code = bench.main(["--url", hivenet_url, "--quick", "--seconds", "1", "--json",
                       "--scenario", "requests_vs_handwritten"])
    out = capsys.readouterr()
    assert code == 0, out.err
    [result] = json.loads(out.out)
    assert (result["scenario"], result["unit"], result["clients"]) == (
        "requests_vs_handwritten", "keys/s", 8)
    assert result["baseline_median"] > 0 and result["candidate_median"] > 0
    assert "client" in out.err and "cpu us/key" in out.err


def test_the_django_peers_case_runs_quick(hivenet_url: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The three libraries served by gunicorn on one database, every answer checked; what 8
    simultaneous requests with one key made is recorded (hivenet-db: one row every time)."""
    from hivenet_db.bench.django_peers import measure

    if (missing := measure.missing()) is not None:
        pytest.skip(missing)
    code = bench.main(["--url", hivenet_url, "--quick", "--json", "--scenario", "django_peers"])
    out = capsys.readouterr()
    assert code == 0, out.err
    results = json.loads(out.out)
    assert [r["scenario"] for r in results] == [
        "django_peers_new_keys_vs_drf-idempotency",
        "django_peers_new_keys_vs_django-idempotency-key",
        "django_peers_replays_vs_drf-idempotency",
        "django_peers_replays_vs_django-idempotency-key"]
    for result in results:
        assert result["unit"] == "requests/s" and result["clients"] == 8
        assert result["baseline_median"] > 0 and result["candidate_median"] > 0
        ours = result["details"]["one_key_8_at_once"]["hivenet-db"]
        assert ours["rows_per_trial"] == [1] * ours["trials"]
        assert set(ours["statuses"]) <= {"201", "409"}
    assert "one key, 8 at once, django-idempotency-key" in out.err

"""Where RequestRepository loses against the hand-written key table (bench case
requests_vs_handwritten), measured piece by piece ("Keyed requests against a hand-written key
table" in docs/design/performance.md).

    python experiments/prototypes/handwritten_gap.py json
        the client's JSON check and error translation, as they were and as they are
        (timeit, best of 15)
    python experiments/prototypes/handwritten_gap.py shapes URL DATA_DIR [TRANSACTIONS ROUNDS]
        server CPU per transaction (every process of the server whose data directory is
        DATA_DIR) of statement shapes, one pgbench client, prepared, rounds alternating; URL: a
        scratch database of that server, migrated, as a superuser (the shapes insert into
        hivenet.request_attempt directly)
    python experiments/prototypes/handwritten_gap.py staircase URL DATA_DIR [SECONDS ROUNDS]
        the same measure for 8 pgbench clients, each transaction committed, of the hand-written
        key table and of the attempt row with what the library adds to it one thing at a time
        (the row; its fingerprint, clock and caller; the checks; the view's owner rights; the
        finish; begin_request): server CPU and transactions a second, medians of ROUNDS
        (default 6) alternating runs of SECONDS (default 5)
    python experiments/prototypes/handwritten_gap.py floor URL DATA_DIR [SECONDS ROUNDS]
        the bench case itself (8 threads) with a third way: the attempt row written bare (the
        INSERT and UPDATE of "the row" above, fingerprint hashed in the application, as a
        superuser: no check, no function, no privilege kept), against the hand-written way and
        RequestRepository
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import sys
import tempfile
import timeit
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.exc import DBAPIError

from hivenet_db._execute import json_text
from hivenet_db.bench import CpuMeter, pgbench
from hivenet_db.bench.handwritten_keys import (
    _TABLE,
    NAMESPACE,
    REQUEST,
    RESPONSE,
    THREADS,
    _rate,
    handwritten,
    repository,
)
from hivenet_db.errors import InvalidInput, from_database, translated

_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def json_text_before(name: str, value: Any) -> str:
    """json_text before: json.dumps with an option (a new encoder each call), then the
    expression over the whole text."""
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError as error:
        raise InvalidInput(f"{name} holds NaN or Infinity ({error})") from None
    if _JSON_NUL.search(text):
        raise InvalidInput(f"{name} holds a NUL character")
    return text


@contextmanager
def translated_before() -> Iterator[None]:
    """translated before: a generator context manager."""
    try:
        yield
    except (DBAPIError, psycopg.Error) as error:
        typed = from_database(error)
        if typed is None:
            raise
        raise typed from error


def client_json() -> None:
    body = {"status": 200, "body": "A" * 10_000}
    cases = [(f"json_text {label} {when}", lambda f=f, v=v: f("x", v), n)
             for label, v, n in (("request", REQUEST, 20_000), ("response", RESPONSE, 20_000),
                                 ("10 kB body", body, 500))
             for when, f in (("before", json_text_before), ("now", json_text))]

    def enter(cm: Any) -> None:
        with cm():
            pass

    cases += [("translated() before", lambda: enter(translated_before), 20_000),
              ("translated() now", lambda: enter(translated), 20_000)]
    for label, call, n in cases:
        best = min(timeit.repeat(call, number=n, repeat=15)) / n * 1e6
        print(f"{label:32} {best:8.2f} us")


_KEY = ":k || 'x' || :client_id"
_REQ = f"'{json.dumps(REQUEST)}'::jsonb"
_RESP = f"'{json.dumps(RESPONSE)}'::jsonb"
_ATTEMPT = ("INSERT INTO hivenet.request_attempt (namespace, key, attempt, state, fingerprint, "
            "started_at) VALUES ('bench.handwritten', {key}, 1, 'processing', {fp}, {now}) "
            "ON CONFLICT DO NOTHING;")
_FINISH = f"SELECT FROM hivenet.finish_request('bench.handwritten', {_KEY}, 1, true, {_RESP});"
# name: statements of one transaction (ended by ROLLBACK, or COMMIT for the *_commit ones)
SHAPES = {
    "hand insert": [f"INSERT INTO public.bench_idempotency_keys (key, fingerprint) VALUES "
                    f"({_KEY}, '\\x00'::bytea) ON CONFLICT DO NOTHING RETURNING key;"],
    "attempt row, bare": [_ATTEMPT.format(key=_KEY, fp="'\\x00'::bytea", now="clock_timestamp()")],
    "attempt row, fingerprint + now()": [_ATTEMPT.format(
        key=_KEY, fp=f"hivenet._fingerprint({_REQ})", now="hivenet.now()")],
    "INSERT INTO _request_start": [
        f"INSERT INTO hivenet._request_start VALUES ('bench.handwritten', {_KEY}, {_REQ}, NULL) "
        "RETURNING 1;"],
    "begin_request": [f"SELECT outcome, attempt, response FROM hivenet.begin_request("
                      f"'bench.handwritten', {_KEY}, {_REQ}, 'replay', NULL, false);"],
    "hand insert + update": [
        f"INSERT INTO public.bench_idempotency_keys (key, fingerprint) VALUES "
        f"({_KEY}, '\\x00'::bytea) ON CONFLICT DO NOTHING RETURNING key;",
        f"UPDATE public.bench_idempotency_keys SET response = {_RESP} WHERE key = {_KEY};"],
    "begin_request + finish_request": [
        f"SELECT outcome, attempt, response FROM hivenet.begin_request("
        f"'bench.handwritten', {_KEY}, {_REQ}, 'replay', NULL, false);", _FINISH],
    "_request_start + finish_request": [
        f"INSERT INTO hivenet._request_start VALUES ('bench.handwritten', {_KEY}, {_REQ}, NULL) "
        "RETURNING 1;", _FINISH],
}


Runs = dict[str, list[tuple[float, float]]]


def _alternating(url: str, data_dir: str, shapes: dict[str, list[str]], end: str, clients: int,
                 rounds: int, **length: int) -> Runs:
    """Each shape as a pgbench script of one transaction ended by ``end``, ``clients`` clients,
    ``rounds`` rounds alternating: per shape, each run's (tps, server CPU µs per transaction).
    ``length``: pgbench's ``seconds`` or ``transactions``."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_TABLE)
    meter = CpuMeter(Path(data_dir))
    names = list(shapes)
    runs: Runs = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as folder:
        scripts = {}
        for i, name in enumerate(names):
            scripts[name] = Path(folder) / f"{i}.sql"
            # committed keys stay: a range wide enough that no two runs draw one twice
            scripts[name].write_text("\n".join(
                ["\\set k random(1, 9000000000000000000)", "BEGIN;", *shapes[name], end]))
        for r in range(rounds):
            for name in names if r % 2 == 0 else reversed(names):
                rate, used = pgbench(url, scripts[name], clients, meter=meter, **length)
                assert used is not None
                runs[name].append((rate, used))
    return runs


def server_shapes(url: str, data_dir: str, transactions: int, rounds: int) -> None:
    runs = _alternating(url, data_dir, SHAPES, "ROLLBACK;", 1, rounds, transactions=transactions)
    for name, each in runs.items():
        cpu = [used for _, used in each]
        print(f"{name:34} server us/tx: min {min(cpu):6.1f}  "
              f"median {statistics.median(cpu):6.1f}")


_ROW = ("INSERT INTO hivenet.request_attempt (namespace, key, attempt, state, fingerprint, "
        "started_at{audit}) {values} ON CONFLICT DO NOTHING RETURNING 1;")
_ROW_VALUES = f"VALUES ('bench.handwritten', {_KEY}, 1, 'processing', '\\x00'::bytea, now())"
_AUDIT = (", called_by, application_name, client_addr",
          f"hivenet._fingerprint({_REQ}), hivenet.now(), hivenet._called_by(), "
          "nullif(current_setting('application_name'), ''), inet_client_addr()")
_AUDIT_VALUES = f"VALUES ('bench.handwritten', {_KEY}, 1, 'processing', {_AUDIT[1]})"
# the rule of view _request_start without the view: the same checks, no owner's rights
_CHECKED_VALUES = (
    f"SELECT n.ns, n.k, 1, 'processing', {_AUDIT[1]} "
    f"FROM (VALUES ('bench.handwritten', {_KEY})) AS n (ns, k) "
    "WHERE hivenet._request_start_valid(n.ns, n.k, NULL) AND NOT EXISTS (SELECT FROM "
    "hivenet.request_namespace p WHERE p.namespace = n.ns AND (p.fingerprint IS NOT NULL OR "
    "p.key_min_length IS NOT NULL OR p.key_pattern IS NOT NULL OR p.audit_chain IS NOT NULL))")
_BARE_UPDATE = ("UPDATE hivenet.request_attempt SET state = 'success', finished_at = now(), "
                f"response = {_RESP} WHERE namespace = 'bench.handwritten' AND key = {_KEY} "
                "AND attempt = 1 AND state = 'processing';")
_VIEW = (f"INSERT INTO hivenet._request_start VALUES ('bench.handwritten', {_KEY}, {_REQ}, NULL) "
         "RETURNING 1;")
# name: statements of one committed transaction, each adding one thing to the one above
STAIRCASE = {
    "hand-written insert + update": SHAPES["hand insert + update"],
    "the attempt row, bare": [_ROW.format(audit="", values=_ROW_VALUES), _BARE_UPDATE],
    "+ fingerprint, clock, caller": [_ROW.format(audit=_AUDIT[0], values=_AUDIT_VALUES),
                                     _BARE_UPDATE],
    "+ checks (names, lease, policy)": [_ROW.format(audit=_AUDIT[0], values=_CHECKED_VALUES),
                                        _BARE_UPDATE],
    "+ owner's rights (view)": [_VIEW, _BARE_UPDATE],
    "+ finish_request": [_VIEW, _FINISH],
    "begin_request + finish_request": SHAPES["begin_request + finish_request"],
}


def staircase(url: str, data_dir: str, seconds: int, rounds: int) -> None:
    runs = _alternating(url, data_dir, STAIRCASE, "COMMIT;", 8, rounds, seconds=seconds)
    base = statistics.median(rate for rate, _ in runs[next(iter(runs))])
    for name, each in runs.items():
        rate = statistics.median(r for r, _ in each)
        print(f"{name:34} {rate:7.0f} tps (ratio {rate / base:.3f})  "
              f"server us/tx median {statistics.median(u for _, u in each):6.1f}")


_FLOOR_INSERT = ("INSERT INTO hivenet.request_attempt (namespace, key, attempt, state, "
                 "fingerprint, started_at) VALUES (%s, %s, 1, 'processing', %s, now()) "
                 "ON CONFLICT DO NOTHING RETURNING 1")
_FLOOR_UPDATE = ("UPDATE hivenet.request_attempt SET state = 'success', finished_at = now(), "
                 "response = %s::jsonb WHERE namespace = %s AND key = %s AND attempt = 1 "
                 "AND state = 'processing'")


def bare_row(conn: psycopg.Connection[Any], key: str, request: Any, response: Any) -> Any:
    """The attempt row written as the hand-written way writes its key row (a new key only)."""
    request_json = json.dumps(request, sort_keys=True, separators=(",", ":"))
    fingerprint = hashlib.sha256(request_json.encode()).digest()
    with conn.transaction():
        if conn.execute(_FLOOR_INSERT, (NAMESPACE, key, fingerprint)).fetchone() is None:
            raise AssertionError(f"key {key} is not new")
        conn.execute(_FLOOR_UPDATE, (json.dumps(response), NAMESPACE, key))
    return response


def bench_floor(url: str, data_dir: str, seconds: int, rounds: int) -> None:
    meter = CpuMeter(Path(data_dir))
    ways = {"hand-written": handwritten, "the attempt row, bare": bare_row,
            "RequestRepository": repository}
    rate: dict[str, list[float]] = {name: [] for name in ways}
    conns = [psycopg.connect(url, autocommit=True) for _ in range(THREADS)]
    try:
        conns[0].execute(_TABLE)
        for call in ways.values():
            _rate(conns, call, 1, None)  # psycopg prepares a statement after 5 runs
        for r in range(rounds):
            for name in list(ways) if r % 2 == 0 else reversed(ways):
                keys, client, server = _rate(conns, ways[name], seconds, meter)
                rate[name].append(keys)
                print(f"  round {r + 1}/{rounds} {name:22} {keys:7.0f} keys/s  client "
                      f"{client:6.1f}  server {server or 0:6.1f} cpu us/key", flush=True)
    finally:
        for conn in conns:
            conn.close()
    base = statistics.median(rate["hand-written"])
    for name in ways:
        print(f"{name:22} median {statistics.median(rate[name]):7.0f} keys/s  "
              f"ratio {statistics.median(rate[name]) / base:.3f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["json"]:
        client_json()
    elif sys.argv[1:2] == ["shapes"] and len(sys.argv) >= 4:
        numbers = [int(a) for a in sys.argv[4:6]] + [3000, 6][len(sys.argv[4:6]):]
        server_shapes(sys.argv[2], sys.argv[3], numbers[0], numbers[1])
    elif sys.argv[1:2] in (["staircase"], ["floor"]) and len(sys.argv) >= 4:
        numbers = [int(a) for a in sys.argv[4:6]] + [5, 6][len(sys.argv[4:6]):]
        (staircase if sys.argv[1] == "staircase" else bench_floor)(
            sys.argv[2], sys.argv[3], numbers[0], numbers[1])
    else:
        sys.exit(__doc__)

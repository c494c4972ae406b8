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
"""

from __future__ import annotations

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
from hivenet_db.bench.handwritten_keys import _TABLE, REQUEST, RESPONSE
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


def server_shapes(url: str, data_dir: str, transactions: int, rounds: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_TABLE)
    meter = CpuMeter(Path(data_dir))
    names = list(SHAPES)
    cpu: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as folder:
        scripts = {}
        for i, name in enumerate(names):
            scripts[name] = Path(folder) / f"{i}.sql"
            scripts[name].write_text("\n".join(
                ["\\set k random(1, 1000000000000)", "BEGIN;", *SHAPES[name], "ROLLBACK;"]))
        for r in range(rounds):
            for name in names if r % 2 == 0 else reversed(names):
                _, used = pgbench(url, scripts[name], 1, transactions=transactions, meter=meter)
                assert used is not None
                cpu[name].append(used)
    for name in names:
        print(f"{name:34} server us/tx: min {min(cpu[name]):6.1f}  "
              f"median {statistics.median(cpu[name]):6.1f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["json"]:
        client_json()
    elif sys.argv[1:2] == ["shapes"] and len(sys.argv) >= 4:
        numbers = [int(a) for a in sys.argv[4:6]] + [3000, 6][len(sys.argv[4:6]):]
        server_shapes(sys.argv[2], sys.argv[3], numbers[0], numbers[1])
    else:
        sys.exit(__doc__)

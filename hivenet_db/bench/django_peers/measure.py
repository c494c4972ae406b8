"""``django_peers``: the same Django REST framework endpoint made idempotent by hivenet-db, by
drf-idempotency 1.0.0 and by django-idempotency-key 1.3.0, in one run.

One ``POST /orders`` view (a serializer checks the body, one row inserted, 201) under
gunicorn (1 worker x 8 threads), Django's connection pool of 8, ``ATOMIC_REQUESTS``, each
library as ``settings`` configures it, all on the runner's database (one PostgreSQL, fsync on
when the runner's own). 8 client threads, each on a keep-alive connection, send for
``seconds``:

- **new keys**: every request a new key (a UUID) and the same body;
- **replays**: the keys of 400 requests made before the round, each sent again.

Rounds alternate the libraries' order; the result is the median of requests per second per
library and workload, as four ``Result`` rows: hivenet-db (candidate) against each peer
(baseline). Every answer is checked: a new key must be answered 201 by a run of the view, a
replay by the library's replay without a new row.

Then **one key, 8 at once**: 8 threads send one new key with the same body at the same instant
(a barrier), ``TRIALS`` times per library; the details of each row say how many rows each
trial made and which statuses came back.
"""

from __future__ import annotations

import http.client
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import psycopg

from hivenet_db.bench import BenchError, Result

NAME = "django_peers"
DESCRIPTION = ("one DRF POST view (insert a row, 201) made idempotent by hivenet-db, "
               "drf-idempotency and django-idempotency-key: gunicorn 1 worker x 8 threads, "
               "Django's pool of 8, ATOMIC_REQUESTS, 8 clients, new keys and replays "
               "(requests/s; goal: hivenet-db >= 1.0x the faster peer on both)")
LIBRARIES = ("hivenet-db", "drf-idempotency", "django-idempotency-key")
PEERS = LIBRARIES[1:]
CLIENTS = 8
REPLAYED_KEYS = 400
TRIALS = 20
BODY = b'{"sku": "tea", "amount": 250}'
SETTINGS = "hivenet_db.bench.django_peers.settings"
# What the bench site needs beyond the library: the packages of the extra [bench-django].
NEEDED = {"gunicorn": "gunicorn", "drf_idempotency": "drf-idempotency",
          "idempotency_key": "django-idempotency-key", "rest_framework": "djangorestframework",
          "psycopg_pool": "psycopg-pool", "django": "django"}


def missing() -> str | None:
    """Why the case cannot run here, or None."""
    import importlib.util

    absent = [package for module, package in NEEDED.items()
              if importlib.util.find_spec(module) is None]
    if absent:
        return (f"needs {', '.join(absent)} (pip install 'hivenet-db[bench-django]')")
    import django

    if django.VERSION < (5, 1):
        return f"needs Django 5.1 or later (its connection pool), found {django.__version__}"
    return None


def _environment(library: str, url: str) -> dict[str, str]:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "HIVENET_BENCH_LIBRARY": library,
            "HIVENET_BENCH_DATABASE_URL": url}


def _manage(url: str, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "django", *args], capture_output=True,
                          text=True, timeout=300, env=_environment(LIBRARIES[0], url))
    if done.returncode != 0:
        raise BenchError(f"{NAME}: django-admin {' '.join(args)} failed: {done.stderr.strip()}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _served(library: str, url: str) -> Iterator[int]:
    """gunicorn serving the site with ``library``: 1 worker, 8 threads; its port."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--workers", "1", "--worker-class", "gthread",
         "--threads", str(CLIENTS), "--bind", f"127.0.0.1:{port}", "--keep-alive", "30",
         "--log-level", "warning", "hivenet_db.bench.django_peers.wsgi:application"],
        env=_environment(library, url), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError as error:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise BenchError(f"{NAME}: gunicorn with {library} did not start: "
                                     f"{server.stderr.read() if server.stderr else ''}"
                                     ) from error
                time.sleep(0.1)
        yield port
    finally:
        server.terminate()  # by its pid: ours
        try:
            server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


def _post(conn: http.client.HTTPConnection, key: str) -> int:
    return _exchange(conn, key)[0]


def _exchange(conn: http.client.HTTPConnection, key: str) -> tuple[int, bytes]:
    conn.request("POST", "/orders", BODY, {"Idempotency-Key": key,
                                           "Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, response.read()


def _busy(library: str, status: int, new: bool = False) -> bool:
    """A refusal to try later, not counted as done: django-idempotency-key's 423 when a
    thread waited longer than its lock's TIMEOUT (0.1 s by default) for the process's lock;
    hivenet-db's 409 for a new key, which no other request has: ``begin_request``'s nowait is
    a lock_timeout of 1 ms, which a lock wait other than for the key can end too (4 of 14,620
    new keys, 8 threads, on a loaded machine)."""
    if library == "django-idempotency-key":
        return status == 423
    return library == "hivenet-db" and new and status == 409


def _replayed(library: str, status: int) -> bool:
    """A replay as each library answers it: the first response again (201), or, by
    django-idempotency-key's default CONFLICT_STATUS_CODE, that response under 409."""
    return status == (409 if library == "django-idempotency-key" else 201)


def _rows(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM bench_shop_order").fetchone()
    return int(row[0]) if row else 0


def _rate(library: str, port: int, url: str, seconds: float,
          keys: Callable[[int], Iterator[str]], new: bool) -> tuple[float, int]:
    """Requests per second done by ``CLIENTS`` threads sending ``keys(i)`` for ``seconds``,
    and how many were refused as busy (``_busy``: not done, not counted); every other answer
    and the rows made are checked."""
    done = [0] * CLIENTS
    busy = [0] * CLIENTS
    wrong: list[str] = []
    stop = threading.Event()

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            for key in keys(i):
                if stop.is_set():
                    return
                status, body = _exchange(conn, key)
                if _busy(library, status, new):
                    busy[i] += 1
                elif (status != 201) if new else not _replayed(library, status):
                    wrong.append(f"{key}: {status} {body[:300]!r}")
                    return
                else:
                    done[i] += 1
        except Exception as error:
            wrong.append(repr(error))
        finally:
            conn.close()

    before = _rows(url)
    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(120)
    elapsed = time.perf_counter() - started
    made = _rows(url) - before
    if wrong:
        raise BenchError(f"{NAME}: {library} answered {wrong[0]} ({len(wrong)} wrong)")
    if made != (sum(done) if new else 0):
        raise BenchError(f"{NAME}: {library} made {made} rows for {sum(done)} "
                         f"{'new keys' if new else 'replays'}")
    return sum(done) / elapsed, sum(busy)


def _new_keys(_: int) -> Iterator[str]:
    while True:
        yield uuid.uuid4().hex


def _made_once(library: str, port: int, n: int) -> list[str]:
    """``n`` new keys, each sent once (the keys the replays send again)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        keys = [uuid.uuid4().hex for _ in range(n)]
        for key in keys:
            while _busy(library, status := _post(conn, key), new=True):
                pass
            if status != 201:
                raise BenchError(f"{NAME}: preparing replays, {library} answered key {key} "
                                 f"{status}")
        return keys
    finally:
        conn.close()


def _at_once(port: int, key: str) -> list[int]:
    """The statuses of ``CLIENTS`` requests with ``key``, each on a connection made before,
    sent together (a barrier)."""
    barrier = threading.Barrier(CLIENTS)
    answers: list[int] = []
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=60) for _ in range(CLIENTS)]
    for conn in conns:
        conn.connect()

    def send(conn: http.client.HTTPConnection) -> None:
        barrier.wait(30)
        answers.append(_post(conn, key))

    threads = [threading.Thread(target=send, args=(c,)) for c in conns]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for conn in conns:
        conn.close()
    return answers


def _one_key_at_once(port: int, url: str, trials: int) -> dict[str, Any]:
    """``trials`` times: 8 threads send one new key at the same instant; rows and statuses."""
    rows_per_trial: list[int] = []
    statuses: Counter[int] = Counter()
    for _ in range(trials):
        key = uuid.uuid4().hex
        answers = _at_once(port, key)
        statuses.update(answers)
        with psycopg.connect(url, autocommit=True) as db:
            row = db.execute("SELECT count(*) FROM bench_shop_order WHERE key = %s",
                             (key,)).fetchone()
        rows_per_trial.append(int(row[0]) if row else 0)
    return {"trials": trials, "rows_per_trial": rows_per_trial,
            "statuses": {str(status): n for status, n in sorted(statuses.items())}}


@dataclass
class _Library:
    name: str
    port: int
    new_keys: list[float] = field(default_factory=list)
    replays: list[float] = field(default_factory=list)
    replay_keys: list[str] = field(default_factory=list)
    busy: Counter[str] = field(default_factory=Counter)  # refused as busy, per workload


def measure(url: str, rounds: int, seconds: float, say: Callable[[str], None],
            quick: bool = False) -> list[Result]:
    """The case on database ``url`` (migrated to head): four results, hivenet-db against each
    peer on new keys and on replays. ``quick``: a tenth of the replayed keys and a quarter of
    the trials, to prove it runs."""
    replayed_keys, trials = (REPLAYED_KEYS // 10, TRIALS // 4) if quick else (REPLAYED_KEYS,
                                                                                TRIALS)
    _manage(url, "migrate", "--verbosity", "0")
    _manage(url, "createcachetable")
    versions = {name: _version(name) for name in (*LIBRARIES, "django", "djangorestframework",
                                                  "gunicorn")}
    say(f"  {NAME}: " + ", ".join(f"{n} {v}" for n, v in versions.items()))
    with ExitStack() as stack:
        libraries = [_Library(name, stack.enter_context(_served(name, url)))
                     for name in LIBRARIES]
        for library in libraries:  # warm: imports, the pool's connections, plans
            _rate(library.name, library.port, url, 1.0, _new_keys, new=True)
            library.replay_keys = _made_once(library.name, library.port, replayed_keys)
        for r in range(rounds):
            order = libraries[r % 3:] + libraries[:r % 3]
            for library in order:
                rate, busy = _rate(library.name, library.port, url, seconds, _new_keys,
                                   new=True)
                library.new_keys.append(rate)
                library.busy["new_keys"] += busy
                keys = library.replay_keys

                def cycling(i: int, keys: list[str] = keys) -> Iterator[str]:
                    while True:
                        yield from keys[i::CLIENTS]

                rate, busy = _rate(library.name, library.port, url, seconds, cycling,
                                   new=False)
                library.replays.append(rate)
                library.busy["replays"] += busy
                say(f"  round {r + 1}/{rounds} {library.name}: new keys "
                    f"{library.new_keys[-1]:.0f}/s, replays {library.replays[-1]:.0f}/s"
                    + (f" (refused as busy so far: {dict(library.busy)})"
                       if sum(library.busy.values()) else ""))
        at_once = {library.name: _one_key_at_once(library.port, url, trials)
                   for library in libraries}
    for name, seen in at_once.items():
        made = sorted(Counter(seen["rows_per_trial"]).items())
        say(f"  one key, 8 at once, {name}: (rows, trials) {made}, statuses "
            f"{seen['statuses']}")
    ours = libraries[0]
    results = []
    for workload in ("new_keys", "replays"):
        def tps(library: _Library, workload: str = workload) -> list[float]:
            return library.new_keys if workload == "new_keys" else library.replays

        for peer in libraries[1:]:
            results.append(Result(
                f"{NAME}_{workload}_vs_{peer.name}",
                f"{workload.replace('_', ' ')}: hivenet-db (candidate) vs {peer.name} "
                f"(baseline), requests/s", CLIENTS, int(seconds), baseline_tps=tps(peer),
                candidate_tps=tps(ours), unit="requests/s",
                details={"versions": versions, "one_key_8_at_once": {
                    ours.name: at_once[ours.name], peer.name: at_once[peer.name]},
                    "refused_as_busy": {lib.name: lib.busy[workload] for lib in libraries},
                    "medians": {lib.name: round(statistics.median(tps(lib)), 1)
                                for lib in libraries}}))
    return results


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


__all__ = ["DESCRIPTION", "NAME", "measure", "missing"]

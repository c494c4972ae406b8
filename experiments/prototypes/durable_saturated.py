"""Transactions a second of issue 29's saturated pool: an engine of 8 connections and 8
threads, each inside ``engine.begin()`` taking a unified serial, and a durable one
(``next_durable``) every 10th transaction. Directly, or through PgBouncer (transaction
pooling, ``--bouncer-pool`` server sessions, started here from tests/servers.py)::

    PYTHONPATH=. python experiments/prototypes/durable_saturated.py postgresql://u@host:port/db
    PYTHONPATH=. python experiments/prototypes/durable_saturated.py URL --bouncer-pool 4 \\
        --durable-direct

``--durable-direct`` gives durable allocation a pool of its own on the server itself
(``configure_durable_pool``; the code before issue 29 had none and ignores it). Prints one
JSON line: transactions, seconds, transactions a second, durable calls that failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

from sqlalchemy import create_engine

from hivenet_db import SerialRepository
from hivenet_db.urls import sqlalchemy_url

THREADS = 8


@contextlib.contextmanager
def _target(url: str, bouncer_pool: int | None) -> Iterator[str]:
    if bouncer_pool is None:
        yield url
        return
    from tests.servers import pgbouncer

    parts = urlsplit(url)
    with pgbouncer(parts.port or 5432, pool_size=bouncer_pool, max_clients=64,
                   user=parts.username or "postgres") as port:
        yield f"postgresql://{parts.username}@127.0.0.1:{port}{parts.path}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--bouncer-pool", type=int)
    parser.add_argument("--durable-direct", action="store_true")
    args = parser.parse_args()
    with _target(args.url, args.bouncer_pool) as url:
        if args.durable_direct:
            from hivenet_db import configure_durable_pool  # type: ignore[attr-defined]

            configure_durable_pool(url, url=args.url)
        engine = create_engine(sqlalchemy_url(url), pool_size=THREADS, max_overflow=0,
                               pool_timeout=30, connect_args={"prepare_threshold": None})
        done = [0] * THREADS
        failed = [0] * THREADS
        stop = time.monotonic() + args.seconds

        def client(t: int) -> None:
            k = 0
            while time.monotonic() < stop:
                try:
                    with engine.begin() as conn:
                        repo = SerialRepository(conn)
                        repo.next_unified("D0001", "A01", f"{t + 1:02d}")
                        if k % 10 == 9:
                            repo.next_durable("unified", system="D0001", module="A01",
                                              instance=f"{t + 1:02d}")
                    done[t] += 1
                except Exception:  # a pool timeout, or the durable pool's own error
                    failed[t] += 1
                k += 1

        started = time.monotonic()
        threads = [threading.Thread(target=client, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.monotonic() - started
        engine.dispose()
    print(json.dumps({"transactions": sum(done), "seconds": round(seconds, 1),
                      "per_second": round(sum(done) / seconds), "failed": sum(failed)}))


if __name__ == "__main__":
    main()

"""How often ``begin_request(..., nowait => true)`` refuses a key no other transaction has
(HN030 "is being started by another transaction right now (nowait)"): 8 threads, each
beginning a new key (a UUID) nowait, inserting a row and finishing it in one transaction,
as the middlewares' one-transaction shape does, for SECONDS on a throwaway PostgreSQL (fsync
on, as the bench's).

    python experiments/nowait_false_conflict.py [SECONDS]

Prints the keys done and the refusals of new keys, each with its message.
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg

from hivenet_db.errors import StepInProgress
from hivenet_db.requests import RequestRepository
from hivenet_db.tools import migrate
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres

THREADS = 8


def main(seconds: float) -> None:
    root = Path(tempfile.mkdtemp(prefix="nowait-probe-"))
    os.chmod(root, 0o755)  # the server's unprivileged user must reach its directory
    server = EmbeddedPostgres(root=root / "pg", fsync=True, progress=lambda _: None)
    server.start()
    try:
        url = server.url()
        migrate.upgrade(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE shop (id bigserial PRIMARY KEY, key text, sku text)")
        refused: collections.Counter[str] = collections.Counter()
        done = [0] * THREADS
        stop = threading.Event()

        def work(i: int) -> None:
            with psycopg.connect(url) as conn:
                repo = RequestRepository(conn)
                while not stop.is_set():
                    key = uuid.uuid4().hex
                    try:
                        start = repo.begin("probe", key, {"method": "POST"}, nowait=True)
                        conn.execute("INSERT INTO shop (key, sku) VALUES (%s, 'tea')", (key,))
                        repo.finish("probe", key, start.attempt, True, {"status": 201})
                        conn.commit()
                        done[i] += 1
                    except StepInProgress as error:
                        conn.rollback()
                        refused[str(error).splitlines()[0].replace(key, "<new key>")] += 1

        threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        stop.set()
        for thread in threads:
            thread.join()
        print(f"new keys done: {sum(done)}, refused: {sum(refused.values())}")
        for message, n in refused.items():
            print(f"  {n} x {message}")
    finally:
        server.remove()


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 30.0)

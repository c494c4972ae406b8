"""Three local PostgreSQL clusters for the sharding tests (tests/test_shards.py): each on a
port of its own (hivenet_db.tools.embedded_postgres.EmbeddedPostgres), started once, migrated
to head, stopped and removed at the end. Tests get fresh databases on each cluster (copies of a
migrated template), so they never see each other's ownership or counters.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from hivenet_db.testing import scratch_dir
from hivenet_db.tools import migrate
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres

TEMPLATE = "hivenet_shard_template"
_numbers = itertools.count()


@dataclass
class ShardClusters:
    servers: list[EmbeddedPostgres]

    @contextlib.contextmanager
    def databases(self) -> Iterator[list[str]]:
        """One fresh database at head on every cluster (their URLs), dropped afterwards."""
        name = f"hivenet_shard_{next(_numbers)}"
        urls = []
        try:
            for server in self.servers:
                with psycopg.connect(server.url(), autocommit=True) as conn:
                    conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                        sql.Identifier(name), sql.Identifier(TEMPLATE)))
                urls.append(server.url(name))
            yield urls
        finally:
            for server in self.servers[:len(urls)]:
                server.drop_database(name)


@contextlib.contextmanager
def shard_clusters(count: int = 3) -> Iterator[ShardClusters]:
    """``count`` clusters, each with a template database migrated to head."""
    root = Path(tempfile.mkdtemp(prefix="hivenet-shards-", dir=scratch_dir()))
    os.chmod(root, 0o755)  # the server's user must reach its directory below
    servers: list[EmbeddedPostgres] = []
    try:
        for i in range(count):
            server = EmbeddedPostgres(root=root / f"shard{i}", fsync=False)
            server.init()
            # Three clusters on a small machine: less memory than the suite's own server.
            with (server.data_dir / "postgresql.auto.conf").open("a") as conf:
                conf.write("shared_buffers = 32MB\nmax_connections = 60\n")
            servers.append(server)
            server.start()
            with psycopg.connect(server.url(), autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
            migrate.upgrade(server.url(TEMPLATE))
        yield ShardClusters(servers)
    finally:
        for server in servers:
            server.remove()
        shutil.rmtree(root, ignore_errors=True)

"""docs/guides/alembic.md, run as written: the package's revisions as a branch of an application's
alembic tree, revisions that never land in the installed package, and the hand-over from a
fresh install by `hivenet-db migrate`."""

from __future__ import annotations

import importlib.resources
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from hivenet_db.tools import migrate
from hivenet_db.tools.migrate import State
from hivenet_db.urls import sqlalchemy_url

BIN = Path(sys.executable).parent
DOC = Path(__file__).resolve().parent.parent / "docs" / "guides" / "alembic.md"
TESTING_DOC = DOC.with_name("testing.md")
# the installed package's revisions (a package of its own: hivenet_db.migrations)
PACKAGE_VERSIONS = Path(str(importlib.resources.files("hivenet_db.migrations"))) / "versions"


def _doc_block(language: str, containing: str, doc: Path = DOC) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", doc.read_text(), re.S)
    [block] = [b for b in blocks if containing in b]
    return str(block)


def _versions() -> set[str]:
    """The files of the installed package's revision directory."""
    return {p.name for p in PACKAGE_VERSIONS.iterdir()}


class Tree:
    """An application's alembic tree in ``root``, set up as docs/guides/alembic.md says."""

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.run("init", "migrations")
        # the documented [alembic] section, the rest (logging) as `alembic init` wrote it
        ini = root / "alembic.ini"
        rest = re.sub(r"^\[alembic\]\n.*?(?=^\[)", "", ini.read_text(), flags=re.M | re.S)
        ini.write_text(_doc_block("ini", "version_locations")
                       + f"sqlalchemy.url = {sqlalchemy_url(url)}\n\n" + rest)
        env = root / "migrations" / "env.py"
        guard = _doc_block("python", "def keep_out_of_the_package")
        configured = env.read_text().replace(
            "target_metadata=target_metadata",
            "target_metadata=target_metadata,\n"
            "        process_revision_directives=keep_out_of_the_package,\n"
            "        transaction_per_migration=True")
        assert configured.count("keep_out_of_the_package") == 2  # offline and online
        env.write_text(guard + "\n\n" + configured)

    def create_orders(self) -> None:
        """The application's first revision, its own branch: table orders, whose serial
        defaults to a hivenet allocation (so it depends on hivenet's head)."""
        self.run("revision", "-m", "create orders", "--head", "base", "--branch-label", "app",
                 "--version-path", "migrations/versions", "--rev-id", "a001",
                 "--depends-on", migrate.head())
        first = self.root / "migrations" / "versions" / "a001_create_orders.py"
        first.write_text(first.read_text().replace(
            "def upgrade() -> None:\n", "def upgrade() -> None:\n    op.execute(\"CREATE TABLE "
            "orders (serial text PRIMARY KEY DEFAULT hivenet.next_unified_serial('C0001', 'A01', "
            "'01'), item text)\")\n", 1))

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(BIN / "alembic"), *args], cwd=self.root,
                                capture_output=True, text=True, check=False, timeout=120)
        assert (result.returncode == 0) == ok, result.stdout + result.stderr
        return result


def test_the_documented_tree(hivenet_url: str, tmp_path: Path, db: psycopg.Connection) -> None:
    # hivenet_url was installed like `hivenet-db migrate` does: schema files, stamped at head
    assert migrate.status(hivenet_url).state is State.HEAD
    shipped = _versions()
    tree = Tree(tmp_path, hivenet_url)
    assert migrate.head() in tree.run("heads").stdout  # the head named from the code

    # The hand-over: stamp hivenet@head in the app's tree, drop hivenet-db's own record.
    tree.run("stamp", "hivenet@head")
    db.execute("DROP TABLE hivenet_alembic_version")
    assert migrate.status(hivenet_url).state is State.UNTRACKED

    # A forgotten --head would write into the package: the guard refuses.
    refused = tree.run("revision", "-m", "oops", ok=False)
    assert "--head app@head" in refused.stderr
    refused = tree.run("revision", "-m", "oops", "--head", "hivenet@head", ok=False)
    assert "installed hivenet-db package" in refused.stderr

    tree.create_orders()
    tree.run("revision", "-m", "second", "--head", "app@head", "--rev-id", "a002")
    assert sorted(p.name for p in (tmp_path / "migrations" / "versions").glob("*.py")) == [
        "a001_create_orders.py", "a002_second.py"]
    assert _versions() == shipped  # nothing written into the package

    tree.run("upgrade", "heads")
    # a001 depends on hivenet's head, so alembic records only the app's head: both are in
    assert [r[0] for r in db.execute("SELECT version_num FROM alembic_version")] == ["a002"]
    assert "a002 (head)" in tree.run("current").stdout
    serial = db.execute("INSERT INTO orders (item) VALUES ('apple') RETURNING serial").fetchone()
    assert serial is not None and serial[0].startswith("C0001A0101")
    hivenet_db_cli = subprocess.run([str(BIN / "hivenet-db"), "migrate", "--check", "--url",
                                     hivenet_url], capture_output=True, text=True, check=False)
    assert hivenet_db_cli.returncode == 6, hivenet_db_cli.stdout  # untracked, as documented


@pytest.mark.parametrize("name", ["path_separator = space", "revision_environment = true",
                                  "hivenet_db.migrations:versions"])
def test_the_documented_ini_has(name: str) -> None:
    assert name in _doc_block("ini", "version_locations")


def test_the_tree_on_the_template_of_docs_testing(hivenet_url: str, tmp_path: Path,
                                                  db: psycopg.Connection,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/guides/testing.md's upgrade_your_tree, as written, on a database installed as the
    plugin's template is: the tree's revisions run, hivenet's are stamped, not replayed."""
    tree = Tree(tmp_path, hivenet_url)
    tree.create_orders()
    namespace: dict[str, object] = {}
    exec(_doc_block("python", "def upgrade_your_tree", TESTING_DOC), namespace)
    monkeypatch.chdir(tmp_path)
    namespace["upgrade_your_tree"](hivenet_url)  # type: ignore[operator]
    assert [r[0] for r in db.execute("SELECT version_num FROM alembic_version")] == ["a001"]
    serial = db.execute("INSERT INTO orders (item) VALUES ('pear') RETURNING serial").fetchone()
    assert serial is not None and serial[0].startswith("C0001A0101")

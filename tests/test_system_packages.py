"""The suite's installer of system packages (tests/system_packages.py): what it decides and
runs, checked with stand-ins for the machine (nothing is removed or installed here)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests import system_packages
from tests.system_packages import Need


def test_on_this_machine_nothing_is_missing_and_nothing_is_said() -> None:
    said: list[str] = []
    ran: list[list[str]] = []
    assert system_packages.ensure(said.append, ran.append) == []
    assert said == [] and ran == []


def _machine(monkeypatch: pytest.MonkeyPatch, absent: set[str], root: bool = True) -> None:
    """Stand-ins: the packages in ``absent`` are missing; the newest server is 15, the one
    the session runs (no HIVENET_TEST_PG_BIN)."""
    monkeypatch.delenv("HIVENET_TEST_PG_BIN", raising=False)
    def there(package: str) -> Callable[[], bool]:
        return lambda: package not in absent

    def needs(original: list[Need]) -> list[Need]:
        return [Need(n.package, n.why, there(n.package)) for n in original]
    server, extensions = system_packages.server_needs, system_packages.extension_needs
    monkeypatch.setattr(system_packages, "server_needs", lambda: needs(server()))
    monkeypatch.setattr(system_packages, "extension_needs",
                        lambda major: needs(extensions(major)))
    monkeypatch.setattr(system_packages, "newest_major", lambda: "15")
    monkeypatch.setattr(system_packages, "can_install", lambda: root)


def test_what_is_missing_is_installed_after_an_update(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, {"pgbouncer", "postgresql-15-plpgsql-check"})
    said: list[str] = []
    ran: list[list[str]] = []
    assert system_packages.ensure(said.append, ran.append) == [
        "pgbouncer", "postgresql-15-plpgsql-check"]
    assert ran == [["apt-get", "update", "-q"],
                   ["apt-get", "install", "-y", "-q", "--no-install-recommends", "pgbouncer",
                    "postgresql-15-plpgsql-check"]]
    assert said == ["installing pgbouncer (tests/test_pgbouncer.py, tests/test_durable_pool.py)"
                    ", postgresql-15-plpgsql-check (tests/test_plpgsql_check.py)"]


def test_a_fresh_machine_gets_the_server_then_the_extensions_of_its_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    everything = {"postgresql", "postgresql-contrib", "pgbouncer", "redis-tools",
                  "postgresql-15-plpgsql-check", "postgresql-15-plproxy",
                  "postgresql-15-auto-failover"}
    _machine(monkeypatch, everything)
    ran: list[list[str]] = []
    installed = system_packages.ensure(lambda _: None, ran.append)
    assert installed == ["postgresql", "postgresql-contrib", "pgbouncer", "redis-tools",
                         "postgresql-15-plpgsql-check", "postgresql-15-plproxy",
                         "postgresql-15-auto-failover"]
    assert [c[1] for c in ran] == ["update", "install", "update", "install"]


def test_without_root_it_only_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, {"redis-tools"}, root=False)
    said: list[str] = []
    ran: list[list[str]] = []
    assert system_packages.ensure(said.append, ran.append) == []
    assert ran == [] and said == ["missing redis-tools (apt-get install them as root): the "
                                  "tests that need them will fail"]

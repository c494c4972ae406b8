"""hivenet_db.testing as users get it: a pytest plugin loaded by its entry point, and the
example of docs/guides/testing.md (examples/) run as written, in a pytest of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.ext.asyncio import AsyncEngine

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["payments.py", "test_payments.py"]


def _copy_examples(pytester: pytest.Pytester) -> None:
    for name in EXAMPLES:
        (pytester.path / name).write_text((ROOT / "examples" / name).read_text())


def test_the_documented_example_passes_with_the_entry_point_alone(
        pytester: pytest.Pytester) -> None:
    _copy_examples(pytester)  # no conftest, no pytest_plugins: the entry point loads it
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error")
    result.assert_outcomes(passed=3)


def test_pytest_plugins_next_to_the_entry_point_loads_it_once(pytester: pytest.Pytester
                                                              ) -> None:
    pytester.makeconftest('pytest_plugins = ["hivenet_db.testing"]')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fixtures")
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(["*hivenet_engine*", "*hivenet_clock*"])


def test_the_plugin_can_be_turned_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_no_fixture(hivenet_url):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider",
                                           "-p", "no:hivenet_db.testing")
    result.stdout.fnmatch_lines(["*fixture 'hivenet_url' not found*"])


def test_docs_show_the_example_as_it_is_tested() -> None:
    docs = (ROOT / "docs" / "guides" / "testing.md").read_text()
    for name in EXAMPLES:
        assert (ROOT / "examples" / name).read_text() in docs, f"docs/guides/testing.md: {name}"


def test_the_login_fixtures_have_productions_privileges(
        hivenet_app_engine: Engine, hivenet_app_async_engine: AsyncEngine,
        hivenet_admin_url: str) -> None:
    """The application's engines connect as a login granted only hivenet_app: the API works,
    an administrator's statement is refused; the admin URL's login holds only hivenet_admin."""
    member_of = ("SELECT string_agg(b.rolname, ',' ORDER BY b.rolname) FROM pg_auth_members m "
                 "JOIN pg_roles b ON b.oid = m.roleid WHERE m.member = current_user::regrole")
    with hivenet_app_engine.connect() as conn:
        assert conn.execute(text(member_of)).scalar_one() == "hivenet_app"
        assert conn.execute(text("SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
                            ).scalar_one().startswith("C0001A0101")
        with pytest.raises(ProgrammingError, match="permission denied"):
            conn.execute(text("SELECT hivenet.maintain()"))

    async def main() -> str:
        async with hivenet_app_async_engine.connect() as conn:
            return str((await conn.execute(text(
                "SELECT hivenet.next_system_serial('C0001', 'A01', '01')"))).scalar_one())

    assert asyncio.run(main()).startswith("C0001A0101")
    with psycopg.connect(hivenet_admin_url) as admin:
        assert admin.execute(member_of).fetchone() == ("hivenet_admin",)
        admin.execute("SELECT hivenet.maintain()")

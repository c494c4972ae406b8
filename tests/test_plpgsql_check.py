"""Every PL/pgSQL function of schema hivenet passes plpgsql_check with no error.

plpgsql_check compiles each body against the real catalog: a misspelt column, a wrong type or
a call to a function that does not exist is found here instead of on the first call in
production. Warnings are printed (``pytest -s`` or on failure), not failures.
"""

from __future__ import annotations

import psycopg
import pytest

from hivenet_db.tools.embedded_postgres import EmbeddedPostgres
from tests.system_packages import packaged_major

# Each plpgsql function of the schema once, a trigger function once per relation it is a
# trigger of (plpgsql_check needs the relation to know NEW and OLD).
FUNCTIONS = """
    SELECT p.oid::regprocedure::text, coalesce(t.tgrelid, 0)::oid, p.prorettype = 'trigger'::regtype
    FROM pg_proc p
    JOIN pg_language l ON l.oid = p.prolang AND l.lanname = 'plpgsql'
    LEFT JOIN pg_trigger t ON t.tgfoid = p.oid AND NOT t.tgisinternal AND t.tgparentid = 0
    WHERE p.pronamespace = 'hivenet'::regnamespace
    ORDER BY 1, 2
"""


def check(db: psycopg.Connection, server: EmbeddedPostgres) -> tuple[list[str], list[str]]:
    """The errors and the warnings plpgsql_check finds in schema hivenet."""
    try:
        db.execute("CREATE EXTENSION IF NOT EXISTS plpgsql_check")
    except psycopg.errors.FeatureNotSupported as error:  # "extension is not available"
        major = packaged_major(server.binaries)
        if major is None:
            pytest.skip(f"plpgsql_check is not in this server ({server.binaries}): it comes "
                        "from Debian's packages, for Debian's servers only")
        pytest.fail(f"plpgsql_check is not installed on this server: apt-get install "
                    f"postgresql-{major}-plpgsql-check ({error})")
    functions = db.execute(FUNCTIONS).fetchall()
    assert len(functions) > 10, functions  # the query finds the schema's functions
    errors: list[str] = []
    warnings: list[str] = []
    for function, relid, is_trigger in functions:
        if is_trigger and relid == 0:
            errors.append(f"{function}: a trigger function of no trigger, cannot be checked")
            continue
        for level, lineno, message, detail, query in db.execute(
                "SELECT level, lineno, message, detail, query "
                "FROM plpgsql_check_function_tb(%s::regprocedure, %s::oid::regclass, "
                "performance_warnings => false, extra_warnings => true)",
                (function, relid)):
            line = (f"{function} line {lineno}: {level}: {message}"
                    + (f" ({detail})" if detail else "") + (f" in: {query}" if query else ""))
            (errors if level == "error" else warnings).append(line)
    return errors, warnings


def test_every_plpgsql_function_passes_plpgsql_check(db: psycopg.Connection,
                                                     hivenet_server: EmbeddedPostgres) -> None:
    errors, warnings = check(db, hivenet_server)
    print("\n".join(["plpgsql_check warnings:", *warnings]))
    assert not errors, "\n".join(errors)


def test_the_check_finds_an_error(db: psycopg.Connection,
                                  hivenet_server: EmbeddedPostgres) -> None:
    # A function that compiles (CREATE checks no SQL in the body) but fails when called.
    db.execute("""CREATE FUNCTION hivenet._broken() RETURNS bigint LANGUAGE plpgsql AS $$
                  BEGIN RETURN (SELECT no_such_column FROM hivenet.setting LIMIT 1); END $$""")
    errors, _ = check(db, hivenet_server)
    assert [e for e in errors if e.startswith("hivenet._broken()")], errors

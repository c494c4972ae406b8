"""Commands that install the schema: ``bootstrap``, ``migrate`` (and ``--check``),
``downgrade``, ``sql``.

``migrate --check`` changes nothing and exits 0 at the package's head, 3 behind it, 4 ahead of
it (a revision this package does not know: the schema is newer than the package), 5 not
installed, 6 untracked (schema hivenet exists but its version table records no revision).
"""

from __future__ import annotations

import argparse

from sqlalchemy import text

from hivenet_db.cli.database import MIGRATABLE, database_url, require_url, status_line
from hivenet_db.cli.output import CommandError, Output, UsageError, dump_json, redact
from hivenet_db.cli.prepare import file_scopes
from hivenet_db.schema import full_schema_sql
from hivenet_db.tools import migrate, scopes
from hivenet_db.tools.dburl import engine_for
from hivenet_db.tools.migrate import State

# Exit status of `migrate --check` for each state.
CHECK_EXIT = {State.HEAD: 0, State.BEHIND: 3, State.AHEAD: 4, State.NOT_INSTALLED: 5,
              State.UNTRACKED: 6}


def _alembic(action: str, args: argparse.Namespace, out: Output) -> None:
    """Run migrate's upgrade or downgrade to ``args.revision``, unless the schema is newer
    than this package or untracked (alembic would fail half-way or install it twice)."""
    # The file is read first: a mistake in it is reported before the schema changes.
    prepared = file_scopes(args.prepare, "--prepare") if getattr(args, "prepare", None) else []
    url = database_url(args, out, to_head=False)
    require_url(url, MIGRATABLE)
    with out.progress(f"{action} schema hivenet to {args.revision}"):
        getattr(migrate, action)(url, args.revision)
    missing = migrate.missing_roles(url) if action == "upgrade" else []
    if missing:
        out.note(f"role(s) {', '.join(missing)} do not exist, so only the schema's owner may "
                 f"use it: a superuser creates them with `hivenet-db bootstrap --owner ROLE`")
    row: dict[str, object] = {"database": redact(url), "revision": migrate.current(url)}
    if getattr(args, "time_zone", None) is not None:  # migrate --time-zone, once upgraded
        row["time_zone"] = set_time_zone(url, args.time_zone)
    if getattr(args, "owns_instances", None) is not None:  # migrate --owns-instances
        row["owned_instances"] = own_instances(url, args.owns_instances,
                                               args.single_primary_formats)
    if prepared:  # migrate --prepare: once the database owns its instances
        with out.progress(f"preparing the scopes of {args.prepare}"), engine_for(url) as engine:
            scopes.prepare(engine, prepared)
        row["prepared_scopes"] = scopes.count(prepared)
    out.rows([row])


def migrate_check(args: argparse.Namespace, out: Output) -> int:
    """``migrate --check``: where the database stands; the exit status says it too."""
    if args.revision != "head":
        raise UsageError("--check compares the database with the package's head: drop "
                           "--revision")
    status = migrate.status(database_url(args, out, to_head=False))
    print(dump_json(status.as_dict()) if out.as_json else status_line(status))
    return CHECK_EXIT[status.state]


def set_time_zone(url: str, zone: str) -> str:
    """Set the business time zone (setting ``time_zone``) in a transaction of its own; the
    database checks it (HN001: not a zone, or behind the current one once serials exist)."""
    with engine_for(url) as engine, engine.begin() as conn:
        return str(conn.execute(text("UPDATE hivenet.setting SET value = :zone "
                                     "WHERE name = 'time_zone' RETURNING value"),
                                {"zone": zone}).scalar_one())


def own_instances(url: str, instances: str, single_primary_formats: bool | None) -> str:
    """Declare the instances this database owns (hivenet.own_instances, docs/guides/scale-out.md)
    in a transaction of its own; HN001 for a malformed list or an instance given up that
    has serials here (forcing that is an SQL call, deliberately)."""
    with engine_for(url) as engine, engine.begin() as conn:
        return str(conn.execute(text("SELECT hivenet.own_instances(:i, :s)"),
                                {"i": instances, "s": single_primary_formats}).scalar_one())


def cmd_migrate(args: argparse.Namespace, out: Output) -> int | None:
    if args.single_primary_formats and args.owns_instances is None:
        raise UsageError("--single-primary-formats goes with --owns-instances")
    if args.check:
        if args.time_zone is not None:
            raise UsageError("--check changes nothing: drop --time-zone")
        if args.owns_instances is not None:
            raise UsageError("--check changes nothing: drop --owns-instances")
        if args.prepare is not None:
            raise UsageError("--check changes nothing: drop --prepare")
        return migrate_check(args, out)
    _alembic("upgrade", args, out)
    return None


def cmd_downgrade(args: argparse.Namespace, out: Output) -> None:
    _alembic("downgrade", args, out)


def cmd_bootstrap(args: argparse.Namespace, out: Output) -> None:
    from hivenet_db.tools import bootstrap

    try:
        result = bootstrap.bootstrap(database_url(args, out, to_head=False), args.owner)
    except bootstrap.BootstrapError as error:
        raise CommandError(str(error)) from None
    if out.as_json:
        print(dump_json({"database": result.database, "owner": result.owner,
                         "changed": result.changed, "complete": result.complete,
                         "actions": [{"statement": a.statement, "outcome": a.outcome}
                                     for a in result.actions]}))
        return
    for action in result.actions:
        print(f"{action.outcome}: {action.statement}")
    if not result.complete:
        print(f"left for the owner: connect as {result.owner} and run the statements marked "
              f"'for the owner'")
    elif not result.changed:
        print(f"nothing to do: database {result.database} is already bootstrapped for "
              f"owner {result.owner}")


def cmd_sql(args: argparse.Namespace, out: Output) -> None:
    print(full_schema_sql())

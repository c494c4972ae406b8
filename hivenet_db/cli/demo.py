"""Command ``demo``: the two examples of the HiveNet Sequence Standards, replayed for real.

Three systems share one database here (in production each has its own): the channel
C0001 (mobile banking) sends a transfer to the payment hub P0001, which makes three calls to
the core banking system K0001 (remittance message, internal account posting, customer
posting), each a step with its own system serial and each call with its own interface serial.

1. A normal transaction: the unified serial is created at the channel and travels in the
   headers of every call; each provider checks the interface serial (duplicate check) and the
   system serial (step state) before working.
2. A step that fails and is retried with the same system serial (and a new interface serial).

Then the same call sent twice is rejected, a step sent again after it succeeded is replayed
with its stored response, and the call chain of the unified serial is listed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from hivenet_db.allocation import SerialRepository, flush_at_commit
from hivenet_db.cli.database import USABLE, database_url, require_url
from hivenet_db.cli.embedded import check_free
from hivenet_db.cli.output import PROG, CommandError, Output, UsageError, redact
from hivenet_db.cli.render import format_table
from hivenet_db.dedup import InterfaceDedup
from hivenet_db.errors import HivenetError
from hivenet_db.propagation import bind_from_headers, outgoing_headers, unified_serial_context
from hivenet_db.steps import StepRepository
from hivenet_db.tools import migrate, scopes
from hivenet_db.tools.dburl import engine_for, from_env
from hivenet_db.tools.embedded_postgres import DEFAULT_DATABASE, EmbeddedPostgres


@dataclass(frozen=True)
class System:
    system: str
    module: str
    instance: str
    name: str


CHANNEL = System("C0001", "A01", "01", "mobile banking (channel)")
HUB = System("P0001", "B01", "01", "payment hub")
CORE = System("K0001", "C01", "01", "core banking")


NEEDS = ("hivenet.claim_interface_serial", "hivenet.call_chain", "hivenet.begin_step",
         "hivenet.finish_step")


class Unavailable(Exception):
    """This database lacks functions the demo calls (an older schema)."""


class BusinessFailure(Exception):
    """The provider's own work failed (here: a posting the core cannot do right now)."""


class Narrator:
    """Prints what happens so a person can follow; with JSON, collects events instead."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.events: list[dict[str, Any]] = []

    def title(self, line: str) -> None:
        self.events.append({"title": line})
        if not self.as_json:
            print(f"\n=== {line}")

    def say(self, who: str, what: str, **data: Any) -> None:
        self.events.append({"who": who, "what": what, **data})
        if not self.as_json:
            print(f"  [{who}] {what}")

    def table(self, rows_: list[dict[str, Any]]) -> None:
        self.events.append({"rows": rows_})
        if not self.as_json:
            print("\n".join("    " + line for line in format_table(rows_).splitlines()))


class Demo:
    def __init__(self, engine: Engine, out: Narrator) -> None:
        self.engine = engine
        self.out = out

    def issue(self, caller: System, kind: str, target: System | None = None) -> str:
        """A serial committed before it leaves the caller (it is sent to another system)."""
        with self.engine.begin() as conn:
            flush_at_commit(conn)
            repo = SerialRepository(conn)
            if kind == "unified":
                return repo.next_unified(caller.system, caller.module, caller.instance)
            if kind == "system":
                return repo.next_system(caller.system, caller.module, caller.instance)
            assert target is not None
            return repo.next_interface(caller.system, caller.module, caller.instance,
                                       target.system)

    def call(self, caller: System, provider: System, step: str, system_serial: str,
             request: dict[str, Any], work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """One interface call: a new interface serial, the serials in the headers, and the
        provider's two checks before its work (SPEC §3 and §4)."""
        interface = self.issue(caller, "interface", provider)
        headers = outgoing_headers(system_serial=system_serial, interface_serial=interface)
        self.out.say(f"{caller.system} -> {provider.system}",
                     f"call {step!r}: interface serial {interface}, system serial "
                     f"{system_serial}, unified serial in the headers",
                     interface_serial=interface, system_serial=system_serial)
        return self.provide(provider, headers, request, work)

    def provide(self, provider: System, headers: dict[str, str], request: dict[str, Any],
                work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The provider side: record the call, then begin the step, in one transaction
        (committed: the step is `processing` while the work runs); finish it afterwards."""
        who = provider.system
        # The unified serial comes from the headers (bound in the context), not an argument.
        with bind_from_headers(headers) as call, self.engine.begin() as conn:
            if call.interface_serial is None or call.system_serial is None:
                raise ValueError(f"the demo's calls carry both serials, not {headers!r}")
            system_serial = call.system_serial
            InterfaceDedup(conn).claim(call.interface_serial, system_serial=system_serial)
            self.out.say(who, "duplicate check: interface serial not seen before, recorded")
            start = StepRepository(conn).begin(system_serial, request)
        if start.replayed:
            self.out.say(who, f"system serial {system_serial} already succeeded: "
                              f"replayed the stored response {json.dumps(start.response)}",
                         outcome=start.outcome)
            return dict(start.response or {})
        self.out.say(who, f"step check: system serial {system_serial} -> attempt "
                          f"{start.attempt} started", outcome=start.outcome,
                     attempt=start.attempt)
        try:
            result = work()
        except BusinessFailure as failure:
            with self.engine.begin() as conn:
                StepRepository(conn).finish(system_serial, start.attempt, False,
                                            {"error": str(failure)})
            self.out.say(who, f"attempt {start.attempt} FAILED ({failure}): step recorded as "
                              "failed")
            raise
        with self.engine.begin() as conn:
            StepRepository(conn).finish(system_serial, start.attempt, True, result)
        self.out.say(who, f"attempt {start.attempt} succeeded: {json.dumps(result)}")
        return result

    def transfer(self, amount: int, fail_internal_posting_once: bool) -> tuple[str, dict[str, str]]:
        """The channel's transaction; returns its unified serial and the hub's step serials."""
        unified = self.issue(CHANNEL, "unified")
        self.out.say(CHANNEL.system, f"new transaction: unified serial {unified}",
                     unified_serial=unified)
        steps: dict[str, str] = {}
        failures = [fail_internal_posting_once]

        def core_posting(name: str) -> Callable[[], dict[str, Any]]:
            def work() -> dict[str, Any]:
                if name == "internal account posting" and failures[0]:
                    failures[0] = False
                    raise BusinessFailure("core timeout while posting")
                return {"status": "ok", "posting": name, "amount": amount}
            return work

        def hub_work() -> dict[str, Any]:
            for name in ("remittance message", "internal account posting", "customer posting"):
                steps[name] = self.issue(HUB, "system")
                request = {"step": name, "amount": amount}
                try:
                    self.call(HUB, CORE, name, steps[name], request, core_posting(name))
                except BusinessFailure:
                    self.out.say(HUB.system, f"retrying {name!r} with the SAME system serial "
                                             f"{steps[name]} and a new interface serial")
                    self.call(HUB, CORE, name, steps[name], request, core_posting(name))
            return {"status": "transferred", "amount": amount}

        with unified_serial_context(unified):
            channel_step = self.issue(CHANNEL, "system")
            self.call(CHANNEL, HUB, "transfer", channel_step, {"transfer": amount}, hub_work)
        return unified, steps

    def duplicates(self, unified: str, steps: dict[str, str]) -> None:
        step = steps["customer posting"]
        request = {"step": "customer posting", "amount": 100}
        with unified_serial_context(unified):
            # The network delivers the very same call twice: same interface serial.
            interface = self.issue(HUB, "interface", CORE)
            headers = outgoing_headers(system_serial=step, interface_serial=interface)
            self.out.say(f"{HUB.system} -> {CORE.system}", "a new call for the customer "
                         "posting (the hub never got the answer), sent twice by the network")
            self.provide(CORE, headers, request, lambda: {"status": "posted again?!"})
            try:
                self.provide(CORE, headers, request, lambda: {"status": "posted again?!"})
            except HivenetError as error:
                self.out.say(CORE.system, f"rejected at once: {type(error).__name__} "
                                          f"({error.sqlstate}): {error.message}",
                             error=type(error).__name__)
            else:
                raise AssertionError("the duplicate call was not rejected")


def prepare_scopes(engine: Engine) -> None:
    """Prepare the channels the demo uses, in the standard's three kinds, so that each counts
    from 1 as in the standard's examples (with the defaults a scope that is not prepared is
    refused: docs/guides/formats.md). A role without the right (``hivenet_app``) runs the
    demo on scopes an administrator prepared."""
    try:
        scopes.prepare(engine, [scopes.parse([s.system, s.module, s.instance])
                                for s in (CHANNEL, HUB, CORE)])
    except DBAPIError as error:
        if getattr(error.orig, "sqlstate", None) != "42501":  # insufficient privilege
            raise


def run(url: str, as_json: bool = False) -> list[dict[str, Any]]:
    """Run the demo against ``url`` (migrated to head); returns the events it printed."""
    out = Narrator(as_json)
    with engine_for(url) as engine:
        with engine.connect() as conn:
            missing = [name for name in NEEDS if conn.execute(
                text("SELECT to_regproc(:n)"), {"n": name}).scalar() is None]
        if missing:
            raise Unavailable(f"the demo needs {', '.join(missing)}, which this database does "
                              f"not have: run `hivenet-db migrate` with a version that has them")
        prepare_scopes(engine)
        demo = Demo(engine, out)
        out.title("Example 1: a normal transaction across three systems")
        out.say("demo", f"{CHANNEL.system} {CHANNEL.name} -> {HUB.system} {HUB.name} -> "
                        f"{CORE.system} {CORE.name}")
        first, first_steps = demo.transfer(100, fail_internal_posting_once=False)
        out.title("Example 2: a step fails and is retried with the same system serial")
        second, _ = demo.transfer(250, fail_internal_posting_once=True)
        out.title("A duplicate call is rejected, a retried step is replayed")
        demo.duplicates(first, first_steps)
        for title, unified in (("example 1", first), ("example 2", second)):
            out.title(f"The call chain of {title}: unified serial {unified}")
            with engine.connect() as conn:
                out.table([dataclasses.asdict(c) for c in InterfaceDedup(conn).call_chain(unified)])
        out.title("What happened")
        out.say("demo", "every provider recorded each interface serial: the resent call was "
                        "rejected before any work")
        out.say("demo", "every step kept its state under its system serial: the failed posting "
                        "ran again under the same serial, the succeeded one was replayed, "
                        "nothing ran twice")
        out.say("demo", f"see it again: hivenet-db report --unified {second}")
    if as_json:
        print(json.dumps(out.events, ensure_ascii=False, indent=2, default=str))
    return out.events


def cmd_demo(args: argparse.Namespace, out: Output) -> None:
    given = args.url or from_env(None)
    if given and (args.port is not None or args.keep):
        raise UsageError("--port and --keep are for the demo's own local PostgreSQL: drop "
                         "them with --url or $HIVENET_DATABASE_URL")
    if given:
        url = database_url(args, out)
        require_url(url, USABLE)
        out.note(f"running the demo in {redact(url)}: it commits its rows there")
        play(url, out)
        return
    with own_server(args.port, args.keep, out) as url:
        play(url, out)


def play(url: str, out: Output) -> None:
    try:
        with out.progress("demo"):
            run(url, as_json=out.as_json)
    except Unavailable as error:
        raise CommandError(str(error)) from None


@contextmanager
def own_server(port: int | None, keep: bool, out: Output) -> Iterator[str]:
    """A local PostgreSQL of the demo's own, in a new directory it names, on ``port`` (else a
    free one), migrated; stopped and removed afterwards unless ``keep``. Never the embedded
    server the other commands share."""
    if port is not None:
        check_free(port)
    root = Path(tempfile.mkdtemp(prefix="hivenet-demo-"))
    server = EmbeddedPostgres(root=root, progress=out.note)
    out.note(f"the demo's own local PostgreSQL, in {root}")
    kept = False
    try:
        with out.progress("local PostgreSQL"):
            server.start(port)
            url = server.ensure_database(DEFAULT_DATABASE)
            migrate.upgrade(url)
        yield url
        kept = keep
    finally:
        if kept:
            out.note(f"kept running on 127.0.0.1:{server.port} with its data in {root}: "
                     f"`{PROG} report --url {url}`; stop it with `HIVENET_EMBEDDED_DIR={root} "
                     f"{PROG} embedded stop`, then remove {root}")
        else:
            server.remove()
            out.note(f"stopped the demo's PostgreSQL and removed {root}" +
                     ("" if keep else " (--keep keeps them)"))

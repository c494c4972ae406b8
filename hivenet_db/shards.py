"""Several primaries, sharded by tenant (docs/guides/scale-out.md).

A :class:`ShardMap` holds one SQLAlchemy engine per shard and a stable placement of every
tenant (a merchant, a system + instance, any key of yours): the tenant's **instance** (the
instance field of its serials, the shard field of its id_service serials) and the shard that
owns that instance. Each shard declares the instances it owns
(``hivenet-db migrate --owns-instances 01-09``, ``hivenet.own_instances``) and refuses to
allocate for any other (HN002), so serials from different shards never collide.

The whole business transaction of a tenant runs on its shard (``shard_map.begin(tenant)``),
with the repositories as on one primary: claims, steps and serials commit or roll back with
the business rows. Retries must carry the same tenant key; a step or claim whose serial's
instance the shard does not own is refused by the shard (HN002), so a retry sent to the wrong
shard fails instead of running twice.

The placements live in a JSON file (:meth:`ShardMap.load` / :meth:`ShardMap.save`), checked
against every shard's declared instances when loaded: adding a shard (owning new instances)
never moves an existing tenant, and a change of ownership that would move one raises
:class:`ShardMapError` naming the tenant.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, text

from ._execute import rows
from .dedup import InterfaceDedup
from .parsing import parse_builtin
from .poolers import UNPREPARED
from .statements import API
from .urls import sqlalchemy_url

T = TypeVar("T")

_INSTANCES = range(100)


class ShardMapError(RuntimeError):
    """The shard map and the shards disagree, or a tenant is unknown or would move."""


@dataclass(frozen=True)
class Placement:
    """Where a tenant lives: its instance (two digits) and the shard that owns it."""

    tenant: str
    instance: str
    shard: str


@dataclass(frozen=True)
class Ownership:
    """What one shard declared (``hivenet.ownership()``)."""

    owned_instances: str
    single_primary_formats: bool
    check_received_instances: bool

    def instances(self) -> frozenset[str]:
        """The owned instances, expanded (``'all'``: 00 to 99)."""
        return expand_instances(self.owned_instances)


def expand_instances(declared: str) -> frozenset[str]:
    """Owned instances as declared (``'01-09,12'``, ``'all'``: 00 to 99), one by one.
    ValueError naming the part that is no instance nor range."""
    if declared.strip().lower() == "all":
        return frozenset(f"{i:02d}" for i in _INSTANCES)
    out: set[str] = set()
    for part in declared.replace(" ", "").split(","):
        low, _, high = part.partition("-")
        if not (low.isdigit() and len(low) == 2
                and (not high or (high.isdigit() and len(high) == 2))):
            raise ValueError(f"owned instances {declared!r}: {part!r} is no instance (00 to 99) "
                             f"nor range (such as 01-09)")
        if int(high or low) < int(low):
            raise ValueError(f"owned instances {declared!r}: range {part!r} ends before it "
                             f"starts")
        out.update(f"{i:02d}" for i in range(int(low), int(high or low) + 1))
    return frozenset(out)


def _engine_for(url: str, prepared: bool = True) -> Engine:
    """A pooled engine for a shard (a libpq URL names the psycopg 3 driver). psycopg prepares
    a statement run often unless ``prepared`` is false: behind PgBouncer in transaction
    pooling a prepared statement is on a server session the next transaction may not get."""
    return create_engine(sqlalchemy_url(url),
                         connect_args={} if prepared else UNPREPARED)


class ShardMap:
    """One engine per shard (``engines``: shard name → engine) and the tenants' placements.

    Nothing connects until asked: :meth:`check` (run by :meth:`load`) reads every shard's
    ownership. ``path``: where :meth:`place` saves new placements (JSON; see :meth:`save`).
    """

    def __init__(self, engines: Mapping[str, Engine], placements: Mapping[str, Placement]
                 | None = None, *, path: str | os.PathLike[str] | None = None,
                 urls: Mapping[str, str] | None = None) -> None:
        if not engines:
            raise ShardMapError("a shard map needs at least one shard")
        self.engines: dict[str, Engine] = dict(engines)
        self.placements: dict[str, Placement] = dict(placements or {})
        self.path = Path(path) if path is not None else None
        self.urls: dict[str, str] = dict(urls or {})
        self._ownership: dict[str, Ownership] | None = None
        for placement in self.placements.values():
            if placement.shard not in self.engines:
                raise ShardMapError(f"tenant {placement.tenant!r} is placed on shard "
                                    f"{placement.shard!r}, which the map does not have "
                                    f"(shards: {', '.join(sorted(self.engines))})")

    # -- file --------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str], engines: Mapping[str, Engine] | None = None,
             *, check: bool = True, prepared: bool = True) -> ShardMap:
        """The map saved in ``path``: ``{"shards": {name: url}, "tenants": {tenant:
        {"instance": "05", "shard": name}}}``. Without ``engines``, one is made per URL of
        the file (keep passwords out of it: libpq's ~/.pgpass or PGPASSWORD), whose
        statements are never prepared when ``prepared`` is false (shards behind PgBouncer in
        transaction pooling). Checked against the shards (:meth:`check`) unless ``check`` is
        false."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        urls = shard_urls_in(path)
        if engines is None:
            engines = {name: _engine_for(url, prepared) for name, url in urls.items()}
        placements = {
            tenant: Placement(tenant, str(p["instance"]), str(p["shard"]))
            for tenant, p in data.get("tenants", {}).items()}
        shard_map = cls(engines, placements, path=path, urls=urls)
        if check:
            shard_map.check()
        return shard_map

    def save(self, path: str | os.PathLike[str] | None = None) -> None:
        """Writes the map (shard URLs as given to :meth:`load`, placements) atomically to
        ``path`` (default: the map's own)."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ShardMapError("the shard map has no file: give save() a path")
        data = {"shards": self.urls,
                "tenants": {t: {"instance": p.instance, "shard": p.shard}
                            for t, p in sorted(self.placements.items())}}
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2)
            out.write("\n")
        os.replace(temporary, target)

    # -- ownership ---------------------------------------------------------------------

    def ownership(self, *, refresh: bool = False) -> dict[str, Ownership]:
        """What each shard declared, read once (again with ``refresh``)."""
        if self._ownership is None or refresh:
            found = {}
            for name, engine in self.engines.items():
                with engine.connect() as conn:
                    ((owned, single, check),) = rows(conn, API["ownership"], {})
                found[name] = Ownership(owned, bool(single), bool(check))
            self._ownership = found
        return self._ownership

    def owners(self) -> dict[str, str]:
        """Instance → the shard that owns it. ShardMapError when two shards own one."""
        owners: dict[str, str] = {}
        for name, declared in sorted(self.ownership().items()):
            if declared.owned_instances == "all" and len(self.engines) > 1:
                raise ShardMapError(
                    f"shard {name!r} owns all instances (it declared none): with several "
                    f"shards each declares its own (hivenet-db migrate --owns-instances 01-09)")
            for instance in sorted(declared.instances()):
                if instance in owners:
                    raise ShardMapError(
                        f"instance {instance} is owned by shards {owners[instance]!r} and "
                        f"{name!r}: their serials would collide; give it up on one "
                        f"(hivenet.own_instances)")
                owners[instance] = name
        return owners

    def check(self) -> None:
        """Every tenant is on the shard that owns its instance, no instance has two owners,
        at most one shard issues the formats without an instance (single_primary_formats).
        ShardMapError naming the first problem (a tenant that would move, first)."""
        owners = self.owners()
        for tenant, placement in sorted(self.placements.items()):
            owner = owners.get(placement.instance)
            if owner != placement.shard:
                where = f"shard {owner!r}" if owner else "no shard"
                raise ShardMapError(
                    f"tenant {tenant!r} is placed on shard {placement.shard!r} with instance "
                    f"{placement.instance}, but that instance is owned by {where}: the tenant "
                    f"would move silently. Restore the ownership, or move the tenant "
                    f"deliberately (docs/guides/scale-out.md)")
        single = sorted(n for n, o in self.ownership().items()
                        if o.single_primary_formats and o.owned_instances != "all")
        if len(single) > 1:
            raise ShardMapError(
                f"shards {', '.join(map(repr, single))} all issue the formats without an "
                f"instance field (single_primary_formats): their serials would collide; "
                f"keep it on one")

    # -- placing tenants ---------------------------------------------------------------

    def place(self, tenant: str, instance: str | None = None) -> Placement:
        """The tenant's placement, made now if it has none: on ``instance`` (e.g. the
        instance of a system + instance tenant, the id_service shard of a merchant), or on
        the least used instance of the shard with the fewest tenants. Saved to the map's
        file when it has one. ShardMapError when the tenant is placed elsewhere already
        (moving a tenant is deliberate: docs/guides/scale-out.md) or no shard owns ``instance``."""
        found = self.placements.get(tenant)
        if found is not None:
            if instance is not None and instance != found.instance:
                raise ShardMapError(
                    f"tenant {tenant!r} is placed on instance {found.instance} (shard "
                    f"{found.shard!r}), not {instance}: moving a tenant is deliberate "
                    f"(docs/guides/scale-out.md)")
            return found
        owners = self.owners()
        if instance is None:
            instance = self._least_used(owners)
        shard = owners.get(instance)
        if shard is None:
            raise ShardMapError(f"no shard owns instance {instance!r} for tenant {tenant!r} "
                                f"(owned: {self._owned_summary()})")
        placement = Placement(tenant, instance, shard)
        self.placements[tenant] = placement
        if self.path is not None:
            self.save()
        return placement

    def _least_used(self, owners: Mapping[str, str]) -> str:
        tenants_per_shard = {name: 0 for name in self.engines}
        tenants_per_instance: dict[str, int] = {}
        for p in self.placements.values():
            tenants_per_shard[p.shard] = tenants_per_shard.get(p.shard, 0) + 1
            tenants_per_instance[p.instance] = tenants_per_instance.get(p.instance, 0) + 1
        candidates = [i for i in owners if i != "00"] or list(owners)
        if not candidates:
            raise ShardMapError("no shard owns any instance")
        return min(candidates, key=lambda i: (tenants_per_shard[owners[i]],
                                              tenants_per_instance.get(i, 0), owners[i], i))

    def _owned_summary(self) -> str:
        return "; ".join(f"{n}: {o.owned_instances}" for n, o in sorted(self.ownership().items()))

    def placement(self, tenant: str) -> Placement:
        """The tenant's placement; ShardMapError when it has none (:meth:`place` it first)."""
        try:
            return self.placements[tenant]
        except KeyError:
            raise ShardMapError(f"tenant {tenant!r} is not placed on any shard: "
                                f"ShardMap.place() it first") from None

    def shard_of(self, tenant: str) -> str:
        return self.placement(tenant).shard

    def instance_of(self, tenant: str) -> str:
        """The instance the tenant's serials carry (instance field, id_service shard)."""
        return self.placement(tenant).instance

    def engine_of(self, tenant: str) -> Engine:
        return self.engines[self.shard_of(tenant)]

    def connect(self, tenant: str) -> AbstractContextManager[Connection]:
        """A connection to the tenant's shard: ``with shard_map.connect(t) as conn``."""
        return self.engine_of(tenant).connect()

    def begin(self, tenant: str) -> AbstractContextManager[Connection]:
        """A transaction on the tenant's shard, committed when the block ends (rolled back
        on an exception): ``with shard_map.begin(t) as conn: SerialRepository(conn)...``."""
        return self.engine_of(tenant).begin()

    def shard_for_instance(self, instance: str) -> str:
        """The shard that owns ``instance``; ShardMapError when none does."""
        shard = self.owners().get(instance)
        if shard is None:
            raise ShardMapError(f"no shard owns instance {instance!r} "
                                f"(owned: {self._owned_summary()})")
        return shard

    def shard_for_serial(self, serial: str, format: str | None = None) -> str:
        """The shard that owns the instance printed in ``serial`` (instance field, or shard
        field of id_service): where a received step or claim of it belongs."""
        fields = parse_builtin(serial, format)
        instance = fields.get("instance", fields.get("shard"))
        if not isinstance(instance, str):
            raise ShardMapError(f"serial {serial!r} has no instance or shard field: route it "
                                f"by its tenant")
        return self.shard_for_instance(instance)

    # -- SQLAlchemy's horizontal sharding ----------------------------------------------

    def shard_chooser(self, tenant_of: Callable[[Any], str]) -> Callable[..., str]:
        """A ``shard_chooser`` for ``sqlalchemy.ext.horizontal_shard.ShardedSession``: the
        shard of ``tenant_of(instance)`` for an ORM object being flushed."""
        def choose(mapper: Any, instance: Any, clause: Any = None) -> str:
            if instance is None:
                raise ShardMapError("no object to choose a shard by: query with "
                                    "execution_options(shard_id=shard_map.shard_of(tenant))")
            return self.shard_of(tenant_of(instance))
        return choose

    # -- across shards -----------------------------------------------------------------

    def each(self, work: Callable[[Connection], T]) -> dict[str, T]:
        """``work(conn)`` on every shard, each in a transaction of its own (committed), in
        shard name order; shard name → result."""
        results: dict[str, T] = {}
        for name in sorted(self.engines):
            with self.engines[name].begin() as conn:
                results[name] = work(conn)
        return results

    def rows(self, sql: str, params: Mapping[str, Any] | None = None
             ) -> list[dict[str, Any]]:
        """The rows of a query on every shard, each with a first column ``shard``."""
        def run(conn: Connection) -> list[dict[str, Any]]:
            return [dict(r) for r in conn.execute(text(sql), dict(params or {})).mappings()]
        return merged(self.each(run))

    def call_chain(self, unified_serial: str) -> list[dict[str, Any]]:
        """``hivenet.call_chain`` over every shard: each recorded call of the business
        transaction, with its ``shard``, in the order recorded (recorded_at across shards,
        the shards' clocks being as close as their NTP keeps them)."""
        def run(conn: Connection) -> list[dict[str, Any]]:
            return [asdict(call) for call in InterfaceDedup(conn).call_chain(unified_serial)]
        return sorted(merged(self.each(run)), key=lambda r: r["recorded_at"])

    def maintain(self) -> dict[str, None]:
        """``hivenet.maintain()`` on every shard, each in its own transaction."""
        return self.each(lambda conn: rows(conn, API["maintain"], {})[0][0])

    def dispose(self) -> None:
        for engine in self.engines.values():
            engine.dispose()


def shard_urls_in(path: str | os.PathLike[str]) -> dict[str, str]:
    """The shards of the map file ``path``: name → URL (its ``"shards"``)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in data.get("shards", {}).items()}


def merged(per_shard: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows of several shards as one list, each row with a first column ``shard``."""
    return [{"shard": name, **row} for name in sorted(per_shard) for row in per_shard[name]]


def named_urls(urls: Mapping[str, str] | Sequence[str]) -> dict[str, str]:
    """Shard name → URL: a list gets the names shard0, shard1, ..."""
    return dict(urls) if isinstance(urls, Mapping) else \
        {f"shard{i}": url for i, url in enumerate(urls)}


def iter_shards(urls: Mapping[str, str] | list[str], prepared: bool = True
                ) -> Iterator[tuple[str, Engine]]:
    """(name, engine) per URL (``named_urls``); libpq URLs use psycopg; ``prepared`` as in
    :meth:`ShardMap.load`."""
    for name, url in named_urls(urls).items():
        yield name, _engine_for(url, prepared)


def from_urls(urls: Mapping[str, str] | list[str], *, prepared: bool = True) -> ShardMap:
    """A shard map without tenants over these URLs (for reports and maintain across shards);
    ``prepared`` as in :meth:`ShardMap.load`."""
    return ShardMap(dict(iter_shards(urls, prepared)), urls=named_urls(urls))

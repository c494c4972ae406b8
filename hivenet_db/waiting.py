"""Waiting for the first outcome of a key in progress (``begin(..., wait=...)``).

A concurrent duplicate of a keyed request meets the first attempt in one of two shapes:

* still uncommitted (begin, work and finish in one transaction): the database itself makes
  the duplicate wait for the row, ``hivenet.begin_request(..., wait)`` bounds that wait;
* committed as ``processing`` (the two-transaction shape: the HTTP middleware, a remote call
  between begin and finish): nothing holds a lock to wait on, and ``begin_request`` raises
  HN030 at once. The client then waits: it ends its transaction (the error aborted it
  anyway), registers with ``hivenet.watch_request`` (committed), begins again (the attempt
  may have ended before the registration was seen) and, if it is still in progress, waits
  for the NOTIFY of ``finish_request`` on a listener connection of its own, at most for what
  is left of ``wait``; then begins again. ``finish_request`` notifies only the attempts a waiter
  marked, so nobody else pays for NOTIFY's lock at commit.

One ``FinishListener`` per database and process (``FinishListener.shared``): a thread with a
session connection of its own, LISTENing, waking the waiters of each key notified. LISTEN needs
a session, which transaction pooling (PgBouncer's ``pool_mode = transaction``) does not keep:
given a URL (``listener=``, Django's ``listen_url``) it listens there, which must reach
PostgreSQL directly or through a pooler in session mode. The repositories' and middlewares'
own listener, on their connection's URL (``direct_only``), listens only where that reaches
PostgreSQL itself (``hivenet_db.poolers``); through a pooler it logs a warning naming what to
configure and does not listen. Waiters whose listener does not listen (through a pooler, or
while it connects again) look again on their own connection at bounded intervals: after
``_LOOK_FIRST`` seconds, the interval doubling up to ``_LOOK_MOST``. While waiting, a waiter
holds no transaction and no pooled server connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from datetime import timedelta
from typing import ClassVar, TypeVar

import psycopg

from hivenet_db.errors import AttemptInProgress, InvalidInput
from hivenet_db.poolers import through_pooler

#: The channel ``hivenet.finish_request`` notifies, payload ``[namespace, key]`` (JSON).
CHANNEL = "hivenet_request_finished"

#: How long the listener waits for the server between two looks at whether it was closed,
#: and before connecting again after losing its connection.
_POLL_SECONDS = 1.0

#: How long the listener keeps its connection after its last waiter left.
_IDLE_SECONDS = 30.0

#: A waiter whose listener does not listen begins again after this many seconds, then at
#: intervals doubling up to _LOOK_MOST: one look a second at most once the wait is long.
_LOOK_FIRST = 0.05
_LOOK_MOST = 1.0

#: A begin's ``wait``: seconds or a timedelta.
Wait = float | timedelta

T = TypeVar("T")
log = logging.getLogger(__name__)


def as_timedelta(wait: Wait) -> timedelta:
    """``wait`` as a timedelta; InvalidInput (HN001) when negative."""
    value = wait if isinstance(wait, timedelta) else timedelta(seconds=wait)
    if value < timedelta(0):
        raise InvalidInput(f"wait {wait!r} is negative")
    return value


class _Waiter:
    """One waiter's wake-up, for a thread (``event``) or an event loop (``woken``)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.woken: asyncio.Event | None = None
        try:
            self.loop = asyncio.get_running_loop()
            self.woken = asyncio.Event()
        except RuntimeError:
            pass

    def wake(self) -> None:
        self.event.set()
        if self.loop is not None and self.woken is not None:
            self.loop.call_soon_threadsafe(self.woken.set)

    def clear(self) -> None:
        self.event.clear()
        if self.woken is not None:
            self.woken.clear()


class FinishListener:
    """LISTENs on ``CHANNEL`` on a session connection of its own (``conninfo``: a libpq
    connection string or URL, direct to PostgreSQL or through a session pooler) in a daemon
    thread, started on first use, and wakes the waiters of each key notified. On a lost
    connection it wakes every waiter (each looks again) and connects again.

    ``direct_only``: listen only if ``conninfo`` reaches PostgreSQL itself; through a pooler
    (which may be in transaction pooling), log a warning once and never listen (``pooled``):
    the listener the repositories and middlewares make on their own connection's URL."""

    _shared: ClassVar[dict[tuple[str, bool], FinishListener]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, conninfo: str, *, direct_only: bool = False) -> None:
        self.conninfo = conninfo
        self.direct_only = direct_only
        #: ``conninfo`` goes through a pooler and ``direct_only``: it never listens
        self.pooled = False
        self._waiters: dict[tuple[str, str], set[_Waiter]] = {}
        self._lock = threading.Lock()
        self._listening = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_waiter = time.monotonic()

    @classmethod
    def shared(cls, conninfo: str, *, direct_only: bool = False) -> FinishListener:
        """The process's listener for ``conninfo``, created on first use."""
        with cls._shared_lock:
            listener = cls._shared.get((conninfo, direct_only))
            if listener is None or listener._closed.is_set():
                listener = cls._shared[conninfo, direct_only] = cls(
                    conninfo, direct_only=direct_only)
            return listener

    def close(self) -> None:
        """Stop listening (within about a second) and wake every waiter."""
        self._closed.set()
        self._wake_all()

    def listening(self, timeout: float) -> bool:
        """Whether it LISTENs within ``timeout`` seconds (the thread started if need be);
        False at once when ``pooled``."""
        if self.pooled:
            return False
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"hivenet-db {CHANNEL} listener")
                self._thread.start()
        return self._listening.wait(timeout)

    @contextmanager
    def watching(self, namespace: str, key: str) -> Iterator[_Waiter]:
        """A waiter woken by each notification of ``key`` in ``namespace`` while inside (and
        by a lost connection). Take it before ``listening``: the thread ends only once nobody
        has waited for ``_IDLE_SECONDS``."""
        waiter = _Waiter()
        with self._lock:
            self._waiters.setdefault((namespace, key), set()).add(waiter)
        try:
            yield waiter
        finally:
            with self._lock:
                waiters = self._waiters.get((namespace, key), set())
                waiters.discard(waiter)
                if not waiters:
                    self._waiters.pop((namespace, key), None)
                self._last_waiter = time.monotonic()

    def _run(self) -> None:
        while not self._stopping():
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    if self.direct_only and through_pooler(conn):
                        self._give_up()
                        return
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._listening.set()
                    self._wake_all()  # those looking again meanwhile: registered, they wait
                    while not self._stopping():
                        for notify in conn.notifies(timeout=_POLL_SECONDS):
                            self._wake(notify.payload)
            except psycopg.Error as error:
                log.warning("%s listener on %s: %s", CHANNEL, _without_password(self.conninfo),
                            error)
            self._listening.clear()
            self._wake_all()  # what was notified meanwhile is lost: every waiter looks again
            if self._stopping(idle_for=0.0):  # nobody waits: connect again only when needed
                return
            self._closed.wait(_POLL_SECONDS)

    def _give_up(self) -> None:
        """``conninfo`` goes through a pooler: never listen, and say what to configure."""
        self.pooled = True
        with self._lock:
            self._thread = None
        log.warning(
            "waiters for keys in progress do not LISTEN on %s: it goes through a connection "
            "pooler (its server process is not the one it reported at connect), where LISTEN "
            "may have no session of its own; they look again every %g to %g s instead. To "
            "wake them when the first attempt ends, give them a URL reaching PostgreSQL "
            "directly or through a pooler in session mode: listener=FinishListener.shared(url) "
            "(the repositories of keyed requests and steps, IdempotencyMiddleware) or "
            "HIVENET['IDEMPOTENCY']['listen_url'] (Django)",
            _without_password(self.conninfo), _LOOK_FIRST, _LOOK_MOST)

    def _stopping(self, idle_for: float = _IDLE_SECONDS) -> bool:
        """Whether the thread ends: closed, or nobody waited for ``idle_for`` seconds (then
        it is gone before anyone can take a waiter; a later one starts it again)."""
        with self._lock:
            idle = not self._waiters and time.monotonic() - self._last_waiter >= idle_for
            if self._closed.is_set() or idle:
                self._listening.clear()
                self._thread = None
                return True
            return False

    def _wake(self, payload: str) -> None:
        try:
            namespace, key = json.loads(payload)
        except (ValueError, TypeError):
            return
        with self._lock:
            waiters = list(self._waiters.get((namespace, key), ()))
        for waiter in waiters:
            waiter.wake()

    def _wake_all(self) -> None:
        with self._lock:
            waiters = [w for each in self._waiters.values() for w in each]
        for waiter in waiters:
            waiter.wake()


def _without_password(conninfo: str) -> str:
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "(a connection string)"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo("", **params)


def _timed_out(busy: AttemptInProgress, wait: timedelta) -> AttemptInProgress:
    return AttemptInProgress(f"{busy.message}; not finished within wait {wait}", busy.sqlstate)


def _seconds_to(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _left(deadline: float) -> timedelta:
    return timedelta(seconds=_seconds_to(deadline))


def waited(listener: Callable[[], FinishListener], namespace: str, key: str, wait: timedelta,
           begin: Callable[[timedelta], T], watch: Callable[[], None],
           end: Callable[[], None]) -> T:
    """``begin(left)`` (``left``: what is left of ``wait``, for ``begin_request``'s own
    bound), and while it raises ``AttemptInProgress`` with time left: ``end()`` the transaction;
    where the listener listens, ``watch()`` (register and commit) and begin again at once,
    then wait for the key's notification and begin again; else begin again after a pause
    (``_Watch.pause``). Raises the last ``AttemptInProgress`` (naming ``wait``) when the key's
    attempt did not end in time."""
    deadline = time.monotonic() + wait.total_seconds()
    with _Watch(listener, namespace, key) as watched:
        while True:
            try:
                return begin(_left(deadline))
            except AttemptInProgress as busy:
                if _left(deadline) <= timedelta(0):
                    raise _timed_out(busy, wait) from busy
                end()
                waiter = watched.waiter()
                pause = watched.pause(deadline)
                if pause is None:
                    watch()
                    watched.registered = True
                    continue  # it may have ended before the registration was seen
                waiter.event.wait(pause)
                watched.woken()


async def waited_async(listener: Callable[[], FinishListener], namespace: str, key: str,
                       wait: timedelta, begin: Callable[[timedelta], Awaitable[T]],
                       watch: Callable[[], Awaitable[None]],
                       end: Callable[[], Awaitable[None]]) -> T:
    """``waited`` for coroutines; the listener's thread wakes the event loop."""
    deadline = time.monotonic() + wait.total_seconds()
    with _Watch(listener, namespace, key) as watched:
        while True:
            try:
                return await begin(_left(deadline))
            except AttemptInProgress as busy:
                if _left(deadline) <= timedelta(0):
                    raise _timed_out(busy, wait) from busy
                await end()
                waiter = watched.waiter()
                pause = await asyncio.to_thread(watched.pause, deadline)
                if pause is None:
                    await watch()
                    watched.registered = True
                    continue
                assert waiter.woken is not None
                with suppress(TimeoutError):
                    await asyncio.wait_for(waiter.woken.wait(), pause)
                watched.woken()


class _Watch:
    """The waiting of one begin: its waiter on the listener (taken on the first HN030),
    whether its registration (``watch_request``) stands, and how often it looked again
    without a listener."""

    def __init__(self, listener: Callable[[], FinishListener], namespace: str,
                 key: str) -> None:
        self._listener = listener
        self._namespace = namespace
        self._key = key
        self._stack = ExitStack()
        self._waiter: _Waiter | None = None
        self._looks = 0
        self.registered = False

    def __enter__(self) -> _Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def pause(self, deadline: float) -> float | None:
        """Seconds to wait before beginning again: None when the listener listens and the
        attempt is not registered yet (register, then begin again at once); what is left
        until ``deadline`` when it is (the notification wakes the waiter earlier); else the
        next interval of looking again. Waits for the listener (started if it was not) at
        most the first interval."""
        listening = self._listener().listening(min(_LOOK_FIRST, _seconds_to(deadline)))
        if listening:
            return _seconds_to(deadline) if self.registered else None
        pause = min(_LOOK_FIRST * 2.0 ** self._looks, _LOOK_MOST, _seconds_to(deadline))
        self._looks += 1
        return pause

    def waiter(self) -> _Waiter:
        """The waiter, taken on first use (in the thread or event loop that waits)."""
        if self._waiter is None:
            self._waiter = self._stack.enter_context(
                self._listener().watching(self._namespace, self._key))
        return self._waiter

    def woken(self) -> None:
        """After a wake-up or a pause: the attempt it marked may have ended; a new one in
        progress (begun by another waiter) is marked again before waiting for it."""
        assert self._waiter is not None
        self._waiter.clear()
        self.registered = False


__all__ = ["CHANNEL", "FinishListener", "Wait", "as_timedelta", "waited", "waited_async"]

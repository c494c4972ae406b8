"""The HTTP ``Idempotency-Key`` protocol, apart from any framework.

What the ASGI middleware (hivenet_db.asgi) and the Django middleware (hivenet_db.django)
share: reading the key from the header, what identifies a request under its key, the answer
to each decision of ``hivenet.begin_request`` (a problem document, or the recorded response
replayed) and the format a response is recorded in. The middlewares only move bytes in and out
of their framework and decide where the transaction runs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
from collections.abc import Collection, Iterable, Sequence
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from hivenet_db.attempts import AttemptStart
from hivenet_db.errors import AttemptInProgress, InvalidInput, RequestMismatch

#: The longest key stored (``hivenet.begin_request`` refuses longer ones): the client's key,
#: prefixed by the percent-encoded scope and ``:`` when ``scope`` is given.
MAX_KEY_LENGTH = 255

#: Response headers recorded and replayed with the status and the body. Others (date, server,
#: set-cookie, caching headers...) belong to one response only and are never replayed.
REPLAYED_HEADERS = frozenset({
    "content-type", "content-encoding", "content-language", "content-location", "location",
    "link",
})

#: The header marking a replayed response, and a response of a handler that ran under the
#: key. The draft defines the request field only and leaves responses to the server; the
#: marker is Stripe's, and ``false`` lets a client tell a response that ran from one the
#: middleware did not cover.
REPLAYED = (b"idempotent-replayed", b"true")
FRESH = (b"idempotent-replayed", b"false")

#: The statuses whose responses are recorded by default (the middlewares'
#: ``stored_statuses``): every one but 4xx. A 4xx (a request the handler refused: validation,
#: authorisation) does not bind the key: the corrected request with the same key runs, as
#: Stripe saves nothing when parameters fail validation.
STORED_STATUSES = frozenset(range(100, 400)) | frozenset(range(500, 600))

#: ``stored_statuses`` that records every response, 4xx as the key's outcome too.
EVERY_STATUS = frozenset(range(100, 600))

#: Status, headers (lower-case names) and body of a response, as bytes.
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


class Refused(Exception):
    """A covered request answered with a problem before (or instead of) its handler."""

    def __init__(self, status: int, detail: str, kind: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.kind = kind

    def answer(self) -> Answer:
        return problem(self.status, self.detail, self.kind)


def parse_key(value: bytes) -> str:
    """The key of an ``Idempotency-Key`` field value: an sf-string (RFC 8941 §3.3.3, the
    draft's syntax), or, leniently, a bare token of visible ASCII without quotes (what many
    clients send). Raises ``ValueError`` naming the problem."""
    raw = value.strip(b" \t")
    if raw.startswith(b'"'):
        out = bytearray()
        i = 1
        while i < len(raw):
            char = raw[i]
            if char == 0x5C:  # backslash: only \" and \\ are escapes
                if i + 1 >= len(raw) or raw[i + 1] not in (0x22, 0x5C):
                    raise ValueError("a backslash in the key escapes neither \" nor \\")
                out.append(raw[i + 1])
                i += 2
            elif char == 0x22:
                if i != len(raw) - 1:
                    raise ValueError("characters after the closing quote (one key only)")
                return out.decode("ascii")
            elif 0x20 <= char <= 0x7E:
                out.append(char)
                i += 1
            else:
                raise ValueError(f"character 0x{char:02x} is not printable ASCII")
        raise ValueError("the opening quote is never closed")
    if not all(0x21 <= char <= 0x7E and char != 0x22 for char in raw):
        raise ValueError("a bare key must be visible ASCII (quote it as an sf-string)")
    return raw.decode("ascii")


def client_key(header: str, values: list[bytes]) -> str:
    """The client's key in the ``header`` fields ``values``. Raises ``Refused`` (400) for a
    missing, repeated, malformed or empty key."""
    if not values:
        raise Refused(400, f"this operation requires the {header} header", "missing")
    if len(values) > 1:
        raise Refused(400, f"more than one {header} header", "invalid")
    try:
        key = parse_key(values[0])
    except ValueError as error:
        raise Refused(400, f"{header} is not a valid key: {error}", "invalid") from None
    if not key:
        raise Refused(400, f"{header} is empty", "invalid")
    return key


def stored_key(header: str, key: str, qualifier: str | None = None) -> str:
    """The key stored for the client's ``key``: prefixed by the percent-encoded ``qualifier``
    (the middleware's ``scope``) and ``:`` when given. Raises ``Refused`` (400) when longer
    than ``MAX_KEY_LENGTH``."""
    if qualifier is not None:
        key = f"{quote(qualifier, safe='')}:{key}"
    if len(key) > MAX_KEY_LENGTH:
        raise Refused(400, f"{header} is longer than {MAX_KEY_LENGTH} characters", "invalid")
    return key


#: What of the body identifies a request (the middlewares' ``fingerprint`` option):
#: ``"bytes"``, ``"json"`` or a list of JSON paths.
Fingerprint = str | Sequence[str]

#: A JSON path the middlewares take: ``$`` then members (``.name``, ``["name"]``) and array
#: elements (``[0]``).
_PATH_STEP = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def check_fingerprint(given: Fingerprint) -> tuple[str, list[list[str | int]]]:
    """The mode (``bytes``, ``json`` or ``paths``) of a ``fingerprint`` option and its paths
    as steps. Raises ``ValueError`` naming what is not understood."""
    if given in ("bytes", "json"):
        return str(given), []
    if isinstance(given, str) or not given:
        raise ValueError(f"fingerprint {given!r} is neither 'bytes', 'json' nor a list of "
                         "JSON paths")
    return "paths", [_path_steps(path) for path in given]


def _path_steps(path: str) -> list[str | int]:
    if not isinstance(path, str) or not path.startswith("$"):
        raise ValueError(f"fingerprint path {path!r} does not start with $")
    steps: list[str | int] = []
    position = 1
    while position < len(path):
        step = _PATH_STEP.match(path, position)
        if step is None:
            raise ValueError(f"fingerprint path {path!r}: {path[position:]!r} is not .name, "
                             '["name"] or [index]')
        name, index, quoted = step.groups()
        steps.append(int(index) if index is not None else
                     name if name is not None else json.loads(quoted))
        position = step.end()
    return steps


def fingerprint(method: str, target: str, body: bytes,
                mode: tuple[str, list[list[str | int]]] = ("bytes", [])) -> dict[str, Any]:
    """What identifies a request under its key: method, request target (path and query) and
    the body (``begin_request`` keeps its hash and refuses another: HN032). By ``mode``
    (``check_fingerprint``): ``bytes``, the SHA-256 of the body; ``json``, the body parsed as
    JSON, its numbers as IEEE 754 doubles (as RFC 8785 reads them: 1, 1.0 and 1e0 are one
    number; key order and whitespace go in the jsonb the document is stored as); ``paths``,
    what each path selects of it (``[]`` when nothing, so a missing member differs from
    null). Raises ``Refused`` (400) when the body is not JSON."""
    kind, paths = mode
    if kind == "bytes":
        return {"method": method, "target": target,
                "body_sha256": hashlib.sha256(body).hexdigest()}
    document = json_body(body)
    if kind == "json":
        return {"method": method, "target": target, "body": document}
    return {"method": method, "target": target,
            "body_paths": [_selected(document, steps) for steps in paths]}


def json_body(body: bytes) -> Any:
    """The body parsed as JSON, every number a finite IEEE 754 double. Raises ``Refused``
    (400) when it is not JSON."""
    try:
        return json.loads(body, parse_int=_double, parse_float=_double,
                          parse_constant=_no_constant)
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError among them
        raise Refused(400, f"the body is not JSON: {error}", "invalid") from None


def _double(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is outside what an IEEE 754 double holds")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _selected(document: Any, steps: list[str | int]) -> list[Any]:
    for step in steps:
        in_list = isinstance(step, int) and isinstance(document, list) and step < len(document)
        in_object = isinstance(step, str) and isinstance(document, dict) and step in document
        found = in_list or in_object
        if not found:
            return []
        document = document[step]
    return [document]


def check_stored_statuses(given: Iterable[int]) -> frozenset[int]:
    """The ``stored_statuses`` option as a set. Raises ``ValueError`` naming a value that is
    not an HTTP status (100 to 599)."""
    if isinstance(given, str | bytes):
        raise ValueError(f"stored_statuses {given!r} is not a collection of statuses")
    statuses = frozenset(given)
    wrong = sorted(repr(status) for status in statuses
                   if not isinstance(status, int) or isinstance(status, bool)
                   or not 100 <= status <= 599)
    if wrong:
        raise ValueError(f"stored_statuses: {', '.join(wrong)} is not an HTTP status "
                         "(100 to 599)")
    return statuses


def recorded_as(status: int, stored: Collection[int]) -> bool | None:
    """How a handler's response of ``status`` ends its attempt: True, the key's success
    (replayed from then on); False, a failed attempt (5xx: a retry runs again, or the failure
    is replayed where the namespace keeps failures final); None, not recorded (a status not in
    ``stored``): the attempt is undone and the key is free for the next request."""
    if status not in stored:
        return None
    return status < 500


def refusal(error: Exception) -> Refused | None:
    """The answer to what ``begin_request`` raised for a covered request, or None for an error
    that is not a decision about the key (the middleware lets it propagate)."""
    if isinstance(error, AttemptInProgress):
        return Refused(409, "a request with this key is being processed; retry later",
                       "in-flight")
    if isinstance(error, RequestMismatch):
        return Refused(422, "this key was used with another request (method, target or body "
                       "differ)", "mismatch")
    if isinstance(error, InvalidInput):
        return Refused(400, f"the key is refused: {error.message}", "invalid")
    return None


#: The answer when an operator resolved the attempt while its handler ran (StaleAttempt).
RESOLVED_MEANWHILE = Refused(
    409, "an operator resolved this request while it ran; its outcome was not recorded (retry "
    "to get the resolved outcome)", "resolved")


def recorded_response(status: int, body: bytes = b"",
                      headers: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
    """A response as the middleware records it (and as an operator passes it to
    ``hivenet.resolve_request`` to have it replayed): status, the replayed headers (names in
    lower case, in order) and the body in base64."""
    kept = [[name.lower(), value] for name, value in headers
            if name.lower() in REPLAYED_HEADERS]
    return {"status": status, "headers": kept, "body": base64.b64encode(body).decode("ascii")}


def replay(start: AttemptStart) -> Answer:
    """The answer to a request whose key's first outcome ``begin_request`` replayed: the
    recorded response (``replayed``), or, when that outcome is a failure the namespace keeps
    final (``start.failed``), ``replayed_failure``."""
    return replayed_failure(start.response) if start.failed else replayed(start.response)


def replayed_failure(error: Any) -> Answer:
    """What to replay for a failure that is final (``hivenet.set_namespace_policy(...,
    on_failure => 'final')``), ``Idempotent-Replayed: true`` last: the recorded response when
    the handler answered 5xx; else a problem document, of kind ``failed`` with the status
    recorded for a raising handler (500), or of kind ``expired`` (500) when the first attempt
    never finished and expired (its error is null)."""
    if isinstance(error, dict) and set(error) == {"status", "headers", "body"}:
        return replayed(error)
    if error is None:
        answer = problem(500, "the first request with this key never finished and expired; "
                         "its failure is final", "expired")
    else:
        recorded = error.get("status") if isinstance(error, dict) else None
        status = recorded if isinstance(recorded, int) and 500 <= recorded <= 599 else 500
        answer = problem(status, "the first request with this key failed; its failure is "
                         "final", "failed")
    status, headers, body = answer
    return status, [*headers, REPLAYED], body


def replayed(response: Any) -> Answer:
    """Status, headers and body to replay from a recorded response, ``Idempotent-Replayed:
    true`` last. Any other JSON value (an operator resolved the request with a plain
    document) is replayed as 200 with that document as ``application/json``; JSON null as 204
    without a body."""
    status, headers, body = _replayable(response)
    return status, [*headers, REPLAYED], body


def _replayable(response: Any) -> Answer:
    if isinstance(response, dict) and set(response) == {"status", "headers", "body"}:
        try:
            status, headers = int(response["status"]), response["headers"]
            body = base64.b64decode(response["body"], validate=True)
            pairs = [(str(name).lower().encode("latin-1"), str(value).encode("latin-1"))
                     for name, value in headers]
            return status, pairs, body
        except (TypeError, ValueError, binascii.Error):
            pass
    if response is None:
        return 204, [], b""
    return (200, [(b"content-type", b"application/json")],
            json.dumps(response, separators=(",", ":")).encode())


def problem(status: int, detail: str, kind: str) -> Answer:
    """An RFC 9457 problem document: ``about:blank`` with the status's phrase as title, the
    detail, and the member ``idempotency`` naming the case (missing, invalid, in-flight,
    mismatch, resolved, failed, expired) for clients that act on it."""
    body = json.dumps({"type": "about:blank", "title": HTTPStatus(status).phrase,
                       "status": status, "detail": detail, "idempotency": kind}).encode()
    return status, [(b"content-type", b"application/problem+json")], body


__all__ = ["EVERY_STATUS", "FRESH", "MAX_KEY_LENGTH", "REPLAYED", "REPLAYED_HEADERS",
           "RESOLVED_MEANWHILE", "STORED_STATUSES", "Answer", "Fingerprint", "Refused",
           "check_fingerprint", "check_stored_statuses", "client_key", "fingerprint",
           "json_body", "parse_key", "problem", "recorded_as", "recorded_response", "refusal",
           "replay", "replayed", "replayed_failure", "stored_key"]

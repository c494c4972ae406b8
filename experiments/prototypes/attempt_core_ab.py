"""A/B of two schemas of keyed attempts in one server: backend CPU per key of begin + finish of
a new keyed request, of a new step, and of a step's replay, in a PL/pgSQL loop run by a
login granted hivenet_app, in two databases (one installed from each version of the code),
rounds alternating. Backend CPU is the session's own time on CPU (/proc/<pid>/schedstat, ns):
less sensitive than wall-clock time to the other work of a shared machine. Each round is one
transaction rolled back, so the tables do not grow.

    python experiments/prototypes/attempt_core_ab.py URL_OF_OLD URL_OF_NEW [ROUNDS] [KEYS]

Each URL is a database at head of its version, reached as a login granted hivenet_app; the
schema owner (the URL's host and port, user postgres) installs the loop and 2,000 succeeded
steps to replay first. Not a benchmark of the suite: a probe behind docs/design/performance.md.
"""

from __future__ import annotations

import statistics
import sys
import urllib.parse

import psycopg

SETUP = """
CREATE SEQUENCE IF NOT EXISTS public.ab_n;
GRANT USAGE ON SEQUENCE public.ab_n TO hivenet_app;
CREATE OR REPLACE FUNCTION public.ab(p_case text, p_n int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_base bigint := nextval('public.ab_n') * 100000;
    v_day text := to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD');
    v_unified text := 'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')
                      || '0000000001';
    v_key text;
    v_attempt int;
BEGIN
    FOR i IN 1 .. p_n LOOP
        IF p_case = 'request' THEN
            v_key := 'ab-' || (v_base + i);
            SELECT b.attempt INTO v_attempt
            FROM hivenet.begin_request('orders', v_key, '{"item": "P0001", "quantity": 2}') b;
            PERFORM hivenet.finish_request('orders', v_key, v_attempt, true, '{"order": 1}');
        ELSIF p_case = 'step' THEN
            v_key := 'C0001B0101' || v_day || lpad((v_base + i)::text, 12, '0');
            SELECT b.attempt INTO v_attempt FROM hivenet.begin_step(
                v_key, '{"amount": 100, "account": "6222020000000001"}', 'replay', v_unified) b;
            PERFORM hivenet.finish_step(v_key, v_attempt, true, '{"ok": true}');
        ELSE  -- a replay
            v_key := 'C0001R0101' || v_day || lpad((1 + i % 2000)::text, 12, '0');
            SELECT b.attempt INTO v_attempt FROM hivenet.begin_step(
                v_key, '{"amount": 100, "account": "6222020000000001"}', 'replay', v_unified) b;
        END IF;
    END LOOP;
END $$;
GRANT EXECUTE ON FUNCTION public.ab(text, int) TO hivenet_app;
DO $$
DECLARE
    v_day text := to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD');
    v_serial text;
BEGIN
    FOR n IN 1 .. 2000 LOOP
        v_serial := 'C0001R0101' || v_day || lpad(n::text, 12, '0');
        CONTINUE WHEN EXISTS (SELECT FROM hivenet.request_attempt a
                              WHERE a.namespace = 'hivenet.steps' AND a.key = v_serial);
        PERFORM FROM hivenet.begin_step(v_serial, '{"amount": 100, "account": "6222020000000001"}',
                                        'replay', 'C0001A0101' || v_day || '0000000001');
        PERFORM hivenet.finish_step(v_serial, 1, true, '{"ok": true}');
    END LOOP;
END $$;
"""


def on_cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as stat:
        return int(stat.read().split()[0])


def owner_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=f"postgres@{parts.hostname}:{parts.port}").geturl()


def main(old: str, new: str, rounds: int = 9, keys: int = 2000) -> None:
    urls = {"old": old, "new": new}
    for url in urls.values():
        with psycopg.connect(owner_url(url), autocommit=True) as owner:
            owner.execute(SETUP)
            owner.execute("VACUUM ANALYZE hivenet.request_attempt")
    conns = {name: psycopg.connect(url, autocommit=True) for name, url in urls.items()}
    pids = {name: conn.info.backend_pid for name, conn in conns.items()}
    cases = ("request", "step", "replay")
    results: dict[tuple[str, str], list[float]] = {}
    for conn in conns.values():  # warm each session's plans
        for case in cases:
            conn.execute("BEGIN")
            conn.execute("SELECT public.ab(%s, 200)", (case,))
            conn.execute("ROLLBACK")
    for round_ in range(rounds):
        for case in cases:
            for name in (("old", "new") if round_ % 2 == 0 else ("new", "old")):
                conn = conns[name]
                conn.execute("BEGIN")
                before = on_cpu_ns(pids[name])
                conn.execute("SELECT public.ab(%s, %s)", (case, keys))
                after = on_cpu_ns(pids[name])
                conn.execute("ROLLBACK")
                results.setdefault((case, name), []).append((after - before) / 1000 / keys)
    for (case, name), values in results.items():
        print(f"{case:8s} {name}: median {statistics.median(values):6.1f} µs, "
              f"min {min(values):6.1f} ({' '.join(f'{v:.0f}' for v in values)})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(arg) for arg in sys.argv[3:5]))

-- The statements of the Python layer: every call it makes of the SQL API, each after a
-- `-- name: NAME` line (hivenet_db.statements reads them). Placeholders are psycopg's, bound by
-- name from the call's parameters: %(name)s, and %(name)b for an array sent in binary, which
-- psycopg writes without quoting each element as the text form needs (CPU per key); a literal
-- percent sign inside a statement is doubled. Each is sent to the driver as written
-- (hivenet_db._execute): one statement per call, on the caller's connection, never committed.

-- name: next_unified_serial
SELECT hivenet.next_unified_serial(%(system)s, %(module)s, %(instance)s)

-- name: next_system_serial
SELECT hivenet.next_system_serial(%(system)s, %(module)s, %(instance)s)

-- name: next_interface_serial
SELECT hivenet.next_interface_serial(%(system)s, %(module)s, %(instance)s, %(target)s)

-- name: next_serials
-- A built-in format's serials, in order (parsed by the Python layer: hivenet_db.serial).
SELECT s FROM hivenet.next_serials(%(format)s, %(fields)s::jsonb, %(count)s)
     WITH ORDINALITY AS t (s, i)
ORDER BY i

-- name: next_serials_parsed
-- A custom format's serials, in order, parsed by the database, which alone knows the format.
SELECT s, hivenet.parse_serial(s, %(format)s)
FROM hivenet.next_serials(%(format)s, %(fields)s::jsonb, %(count)s) WITH ORDINALITY AS t (s, i)
ORDER BY i

-- name: next_time_id
-- fields: NULL when the format has none (time_id's fast path then reads no JSON at all).
SELECT hivenet.next_time_id(%(format)s, %(fields)s::jsonb)

-- name: next_time_ids
-- In increasing order as next_time_ids returns them: it is inlined into this statement (no
-- WITH ORDINALITY, which would keep it from that).
SELECT * FROM hivenet.next_time_ids(%(format)s, %(count)s, %(fields)s::jsonb)

-- name: parse_time_id
-- The id sent as text: a bigint, where the library's other parameters are integers.
SELECT hivenet.parse_time_id(%(id)s::bigint, %(format)s)

-- name: flush_at_commit
SELECT hivenet.flush_at_commit()

-- name: parse_serial
SELECT hivenet.parse_serial(%(serial)s, %(format)s)

-- name: claim_interface_serial
SELECT hivenet.claim_interface_serial(%(serial)s, %(unified_serial)s, %(system_serial)s,
                                      %(nowait)s)

-- name: call_chain
SELECT * FROM hivenet.call_chain(%(unified_serial)s)

-- name: claim
SELECT hivenet.claim(%(namespace)s, %(key)s, %(nowait)s)

-- name: set_claim_expiry
SELECT hivenet.set_claim_expiry(%(namespace)s, %(expiry)s)

-- name: begin_request
SELECT outcome, attempt, response
FROM hivenet.begin_request(%(namespace)s, %(key)s, %(request)s::jsonb, %(on_success)s,
                           %(lease)s, %(nowait)s, %(wait)s::interval, %(raw_request)s::bytea)

-- name: raw_request
SELECT raw_request FROM hivenet.raw_requests
WHERE namespace = %(namespace)s AND key = %(key)s AND attempt = %(attempt)s

-- name: finish_request
SELECT FROM hivenet.finish_request(%(namespace)s, %(key)s, %(attempt)s, %(succeeded)s,
                                   %(response)s::jsonb)

-- name: resolve_request
SELECT FROM hivenet.resolve_request(%(namespace)s, %(key)s, %(attempt)s, %(succeeded)s,
                                    %(note)s, %(response)s::jsonb)

-- name: begin_requests
SELECT key, outcome, attempt, response
FROM hivenet.begin_requests(%(namespace)s, %(keys)b::text[], %(requests)b::text[]::jsonb[],
                            %(lease)s)

-- name: finish_requests
SELECT FROM hivenet.finish_requests(%(namespace)s, %(keys)b::text[], %(attempts)b::integer[],
                                    %(succeeded)b::boolean[], %(responses)b::text[]::jsonb[])

-- name: watch_request
-- A waiter's registration (hivenet_db.waiting), for requests and steps alike.
SELECT FROM hivenet.watch_request(%(namespace)s, %(key)s)

-- name: set_request_retention
SELECT hivenet.set_request_retention(%(namespace)s, %(retention)s)

-- name: begin_step
SELECT outcome, attempt, response
FROM hivenet.begin_step(%(key)s, %(request)s::jsonb, %(on_success)s, %(unified_serial)s,
                        %(lease)s, %(nowait)s, %(wait)s::interval)

-- name: finish_step
SELECT FROM hivenet.finish_step(%(key)s, %(attempt)s, %(succeeded)s, %(response)s::jsonb)

-- name: resolve_step
SELECT FROM hivenet.resolve_step(%(key)s, %(attempt)s, %(succeeded)s, %(note)s,
                                 %(response)s::jsonb)

-- name: begin_steps
SELECT system_serial, outcome, attempt, response
FROM hivenet.begin_steps(%(keys)b::text[], %(requests)b::text[]::jsonb[], %(unified_serial)s,
                         %(lease)s)

-- name: finish_steps
SELECT FROM hivenet.finish_steps(%(keys)b::text[], %(attempts)b::integer[],
                                 %(succeeded)b::boolean[], %(responses)b::text[]::jsonb[])

-- name: ownership
SELECT owned_instances, single_primary_formats, check_received_instances
FROM hivenet.ownership()

-- name: maintain
SELECT hivenet.maintain()

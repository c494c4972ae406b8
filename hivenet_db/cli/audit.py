"""``audit verify NAMESPACE``: check the audit chain of a namespace of keyed requests
(hivenet.verify_audit_chain, audit.sql)."""

from __future__ import annotations

import argparse

from hivenet_db.cli.database import dicts, transaction
from hivenet_db.cli.output import Output, dump_json

# Exit status when the chain is broken (a usage mistake is 2, an error 1 with its message).
BROKEN = 3


def cmd_audit(args: argparse.Namespace, out: Output) -> int:
    with transaction(args, out) as conn:
        (found,) = dicts(conn, "SELECT * FROM hivenet.verify_audit_chain(:namespace)",
                         {"namespace": args.namespace})
    found["head"] = found["head"].hex()
    if out.as_json:
        print(dump_json({"namespace": args.namespace, "intact": found["problem"] is None,
                         **found}))
    elif found["problem"] is None:
        print(f"chain of {found['attempts']} attempts intact ({found['links']} links since "
              f"the anchor), head {found['head']}")
    else:
        print(f"chain of namespace {args.namespace} broken at link {found['position']}: "
              f"{found['problem']}")
    return 0 if found["problem"] is None else BROKEN

"""An agent runtime for the kill tests: one tool call through the onceplan
client against a real `onceplan serve`, the tool being a POST to an outside
HTTP system with the key as its Idempotency-Key.

    python3 tests/agent.py URL TOKEN TOOL EVENT TARGET SINK [POINT]

With POINT (intent, body or call) the agent prints "reached POINT" on
stdout (with the key) when it gets there and blocks, for the test to kill it with
SIGKILL: intent — the begin's 201 is in hand (the intent is durable), no
body; body — the body began, the outside call not made; call — the outside
system answered, no settle yet. Without, it is a restarted runtime: the
call once, and one JSON line saying what it did.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.request
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from onceplan import Call, Client, InDoubt, NotPerformed, Rejected, subject  # noqa: E402

LEASE_SECONDS = 3


def reach(point: str, crash: str, key: str) -> None:
    if point == crash:
        print(f"reached {point} {key}", flush=True)
        threading.Event().wait()  # until the test's SIGKILL


def main(argv: list[str]) -> int:
    url, token, tool, event, target, sink = argv[:6]
    crash = argv[6] if len(argv) > 6 else ""
    client = Client(url, token)
    args = {"value": target + "-on"}

    def body(call: Call) -> tuple[bytes, str]:
        reach("body", crash, call.key)
        req = urllib.request.Request(sink, data=json.dumps({"target": target}).encode(), method="POST",
                                     headers={"Idempotency-Key": call.key, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as res:
                raw = res.read()
        except urllib.error.HTTPError as e:
            # The outside system answered and refused: nothing happened.
            raise Rejected(f"the outside system answered HTTP {e.code}", raw=e.read()) from e
        reach("call", crash, call.key)
        return raw, json.loads(raw).get("receipt", "")

    if crash == "intent":
        eff, status = client.begin(event, tool, subject(target), args, lease_seconds=LEASE_SECONDS)
        if status != 201:
            print(f"agent: begin answered {status}: {eff}", file=sys.stderr)
            return 3
        reach("intent", crash, eff.key)
        return 3

    performed = False
    out: dict[str, Any] = {}

    def counted(call: Call) -> tuple[bytes, str]:
        nonlocal performed
        performed = True
        return body(call)

    try:
        if crash:
            # The context manager, as a runtime writes it.
            with client.effect(event, tool, subject(target), args, lease_seconds=LEASE_SECONDS) as call:
                if call.perform:
                    call.answer(*counted(call))
            res = call.result
        else:
            res = client.effect(event, tool, subject(target), args, lease_seconds=LEASE_SECONDS).run(counted)
        assert res is not None
        out = {"replayed": res.replayed, "state": res.effect.state, "takeover": res.effect.takeover,
               "key": res.effect.key, "receipt": res.receipt}
    except NotPerformed as e:
        kind = {"AwaitingApproval": "awaiting approval", "InDoubt": "in doubt", "ArgsMismatch": "args mismatch"}[type(e).__name__]
        out = {"refused": kind, "state": e.effect.state, "next": e.effect.next, "retry_after": e.effect.retry_after,
               "key": e.effect.key}
        if isinstance(e, InDoubt) and performed:
            out["error"] = str(e)
    except Exception as e:  # the body's error, after its settle
        out = {"error": f"{type(e).__name__}: {e}"}
    out["performed"] = performed
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

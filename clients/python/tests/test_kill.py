"""The kill matrix: agent processes (tests/agent.py, using this client)
killed with SIGKILL after the intent is durable, after the body started
and after the outside call (before the settle), for a tool with recovery
dedupe, probe and none, against a real `onceplan serve`; then restarted.
The outside system's record file (synced on each effect) alone judges how
many effects happened.

A Go test (clients/pythontest) starts the server, registers the tools,
owns the outside systems and runs this with:

  ONCEPLAN_IT             1: these tests must run (fail when unset)
  ONCEPLAN_URL            the server
  ONCEPLAN_AGENT_TOKEN    an agent token
  ONCEPLAN_OPERATOR_TOKEN an operator's token (resolves unknowns)
  ONCEPLAN_IT_TOOLS       JSON: {tool: {"recovery", "sink", "record"}}
  ONCEPLAN_KILL_RUNS      runs of each tool × point (default 1)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from onceplan import APIError, Client

AGENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent.py")
POINTS = ("intent", "body", "call")
# Effects at the outside system right after the kill at each point.
EFFECTS_AT_KILL = {"intent": 0, "body": 0, "call": 1}
DEADLINE = 90.0


class Failure(Exception):
    pass


class World:
    def __init__(self) -> None:
        self.url = os.environ["ONCEPLAN_URL"]
        self.agent_token = os.environ["ONCEPLAN_AGENT_TOKEN"]
        self.tools: dict[str, dict[str, str]] = json.loads(os.environ["ONCEPLAN_IT_TOOLS"])
        self.agent = Client(self.url, self.agent_token)
        self.operator = Client(self.url, os.environ["ONCEPLAN_OPERATOR_TOKEN"])

    def effects(self, tool: str, key: str) -> int:
        """The outside system's effects of key, from its record file."""
        try:
            with open(self.tools[tool]["record"], encoding="utf-8") as f:
                return sum(1 for line in f if line.strip() and json.loads(line)["effect_id"] == key)
        except FileNotFoundError:
            return 0

    def argv(self, tool: str, event: str, target: str, point: str = "") -> list[str]:
        argv = [sys.executable, AGENT, self.url, self.agent_token, tool, event, target, self.tools[tool]["sink"]]
        return argv + [point] if point else argv

    def kill_at(self, tool: str, event: str, target: str, point: str) -> str:
        """Run the agent until it reports point, SIGKILL it there; its key."""
        p = subprocess.Popen(self.argv(tool, event, target, point), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        watchdog = threading.Timer(60, p.kill)
        watchdog.start()
        try:
            line = p.stdout.readline() if p.stdout else ""
        finally:
            watchdog.cancel()
        if not line.startswith(f"reached {point} "):
            p.kill()
            _, err = p.communicate()
            raise Failure(f"{event}: the agent did not reach {point} (it printed {line!r}): {err}")
        os.kill(p.pid, signal.SIGKILL)
        p.communicate()
        if p.returncode != -signal.SIGKILL:
            raise Failure(f"{event}: the agent was not killed by SIGKILL (exit {p.returncode})")
        return line.split()[2]

    def restart(self, tool: str, event: str, target: str, body_errors: bool = False) -> dict[str, Any]:
        """A restarted runtime: the call once; what it did."""
        p = subprocess.run(self.argv(tool, event, target), capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise Failure(f"{event}: the restarted agent exited {p.returncode}: {p.stderr}")
        try:
            out: dict[str, Any] = json.loads(p.stdout)
        except ValueError:
            raise Failure(f"{event}: the restarted agent printed {p.stdout!r}: {p.stderr}") from None
        if "error" in out and not body_errors:
            raise Failure(f"{event}: the restarted agent: {out}")
        return out

    def recover(self, tool: str, point: str, i: int) -> None:
        recovery = self.tools[tool]["recovery"]
        event, target = f"{tool}/{point}/{i}", f"acct-{point}-{i}"
        key = self.kill_at(tool, event, target, point)
        before = self.effects(tool, key)
        if before != EFFECTS_AT_KILL[point]:
            raise Failure(f"{event}: {before} effects at the outside system after the kill, want {EFFECTS_AT_KILL[point]}")
        end = time.monotonic() + DEADLINE
        if recovery in ("dedupe", "probe"):
            # A restarted runtime begins again until it performs or replays.
            while True:
                out = self.restart(tool, event, target, body_errors=True)
                if "error" in out:
                    # Its outside call failed (a timeout under load): settled
                    # unknown, which recovery takes up as any doubt.
                    pass
                elif out["performed"] or out.get("replayed"):
                    # A dedupe tool's attempt in doubt is usually performed again as a
                    # takeover; on a busy machine a takeover whose begin is answered after
                    # its own lease performs nothing and frees the key, and the next begin
                    # performs it afresh. The end is what is asserted: done, once, no person.
                    break
                elif out.get("refused") != "in doubt" or (recovery == "dedupe" and out.get("state") == "unknown"):
                    raise Failure(f"{event}: the restarted agent got {out}")
                if time.monotonic() > end:
                    raise Failure(f"{event}: not recovered within {DEADLINE:.0f}s: {out}")
                time.sleep(0.3)  # polling the ledger's state, under the deadline
        else:
            # Maintenance alone turns the ended lease into an unknown, for a
            # person; a restarted runtime is told not to call.
            eff = self.operator.wait(key, DEADLINE, until=lambda e: e.state == "unknown")
            if eff.state != "unknown" or "a person resolves it" not in eff.next:
                raise Failure(f"{event}: the attempt is {eff.state} ({eff.next!r}), want it unknown for a person")
            out = self.restart(tool, event, target)
            if out["performed"] or out.get("refused") != "in doubt" or out.get("state") != "unknown":
                raise Failure(f"{event}: the restarted agent on an unknown: {out}")
            if (n := self.effects(tool, key)) != before:
                raise Failure(f"{event}: {n} effects after the restart on an unknown, want {before}")
            # An agent's token never resolves.
            try:
                self.agent.resolve(key, "delivered", "an agent guessing")
                raise Failure(f"{event}: an agent's token resolved an unknown")
            except APIError as e:
                if e.status != 403:
                    raise Failure(f"{event}: an agent's resolve answered {e.status}, want 403: {e}") from e
            # The operator looks at the outside system and says what it did.
            delivered = self.effects(tool, key) == 1
            outcome = "delivered" if delivered else "not_delivered"
            self.operator.resolve(key, outcome, "checked the outside system's history")
            out = self.restart(tool, event, target)
            if delivered and (not out.get("replayed") or out["performed"]):
                raise Failure(f"{event}: after a person resolved it delivered, the agent got {out}, want a replay")
            if not delivered and (not out["performed"] or out.get("state") != "done"):
                raise Failure(f"{event}: after a person resolved it not delivered, the agent got {out}, want it performed")
        if (n := self.effects(tool, key)) != 1:
            raise Failure(f"{event}: {n} effects at the outside system after recovery, want exactly 1")
        if (state := self.agent.get(key).state) != "done":
            raise Failure(f"{event}: after recovery the ledger says {state}, want done")
        # And a further begin replays, never calls again.
        out = self.restart(tool, event, target)
        if not out.get("replayed") or out["performed"]:
            raise Failure(f"{event}: a begin after recovery: {out}")


@unittest.skipUnless(os.environ.get("ONCEPLAN_URL") or os.environ.get("ONCEPLAN_IT"),
                     "needs a running onceplan serve (clients/pythontest runs it)")
class KillMatrix(unittest.TestCase):
    def test_kill_matrix(self) -> None:
        """Every kill point × dedupe, probe and none, ONCEPLAN_KILL_RUNS
        times each, side by side (they wait on leases and probes, not on
        the CPU): exactly one effect in the end, never two."""
        world = World()
        runs = int(os.environ.get("ONCEPLAN_KILL_RUNS") or "1")
        jobs = [(tool, point, i) for tool in world.tools for point in POINTS for i in range(runs)]
        with ThreadPoolExecutor(max_workers=len(jobs)) as ex:
            futures = {job: ex.submit(world.recover, *job) for job in jobs}
        errors = [f"{job}: {f.exception()}" for job, f in futures.items() if f.exception() is not None]
        self.assertEqual([], errors)


if __name__ == "__main__":
    unittest.main()

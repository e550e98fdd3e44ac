"""wrap_tool with plain callables, as a LangGraph ToolNode calls a tool
(the model's arguments as keywords, the run's config); LangChain itself
is not installed here. The server is a scripted one."""

from __future__ import annotations

import inspect
import json
import unittest
from typing import Any

from onceplan import Client, InDoubt, Rejected, langgraph_event, subject, wrap_tool

from .scripted import ScriptedServer

TOKEN = "test-token"
BEGIN_201 = {"status": 201, "body": {"key": "K1", "state": "pending", "lease": "L1", "lease_seconds": 60,
                                    "lease_until": "{{now+60s}}"}}


def config(thread: str = "thread-9", step: int = 4, ns: str = "tools:1b5e0c3a-77aa-4c1e-9d0b-0f0e6c1d2a3b",
           tool_call_id: str = "call_abc") -> dict[str, Any]:
    """A config as LangGraph passes it to a tool of a ToolNode."""
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ns},
            "metadata": {"thread_id": thread, "langgraph_step": step, "langgraph_node": "tools",
                         "langgraph_checkpoint_ns": ns},
            "tool_call_id": tool_call_id}


class WrapTool(unittest.TestCase):
    def setUp(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def set_status(self, customer: str, status: str, idempotency_key: str) -> dict[str, Any]:
        """Set a customer's status in the CRM."""
        self.calls.append({"customer": customer, "status": status, "key": idempotency_key})
        return {"id": "op-1", "status": status}

    def tool(self, server: ScriptedServer, **kw: Any) -> Any:
        return wrap_tool(Client(server.url, TOKEN), self.set_status, tool="crm.set_status",
                         target_from=lambda a: subject(a["customer"]), receipt_from=lambda v: v["id"], **kw)

    def test_performs_with_the_thread_and_step_as_event(self) -> None:
        answers = {"begin": [BEGIN_201], "settle": [{"status": 200, "body": {"key": "K1", "state": "done"}}]}
        with ScriptedServer(TOKEN, answers) as server:
            out = self.tool(server)(customer="c-17", status="gold", config=config())
            self.assertEqual({"id": "op-1", "status": "gold"}, out)
            self.assertEqual([{"customer": "c-17", "status": "gold", "key": "K1"}], self.calls)
            begin = server.sent["begin"][0]
            # The run's thread and the checkpoint's step (the node's name,
            # not its task id); never the model's tool_call_id.
            self.assertEqual("langgraph/thread-9/tools/step-4", begin["event"])
            self.assertNotIn("call_abc", json.dumps(begin))
            self.assertEqual({"kind": "subject", "value": "c-17"}, begin["target"])
            self.assertEqual({"customer": "c-17", "status": "gold"}, begin["args"])
            settle = server.sent["settle"][0]
            self.assertEqual(("done", "op-1"), (settle["outcome"], settle["receipt"]))
            self.assertEqual({"id": "op-1", "status": "gold"}, json.loads(settle["raw"]))

    def test_a_rerun_replays_without_calling(self) -> None:
        """A model that runs again mints a new tool_call_id; the thread and
        step are the checkpoint's, so the begin replays."""
        answers = {"begin": [{"status": 200, "body": {"key": "K1", "state": "done", "receipt": "op-1",
                                                      "raw": "{\"id\": \"op-1\", \"status\": \"gold\"}"}}]}
        with ScriptedServer(TOKEN, answers) as server:
            out = self.tool(server)(customer="c-17", status="gold", config=config(tool_call_id="call_new"))
            self.assertEqual({"id": "op-1", "status": "gold"}, out)
            self.assertEqual([], self.calls)
            self.assertEqual("langgraph/thread-9/tools/step-4", server.sent["begin"][0]["event"])

    def test_without_a_run_it_refuses_to_guess(self) -> None:
        with ScriptedServer(TOKEN, {}) as server:
            with self.assertRaisesRegex(ValueError, "thread_id"):
                self.tool(server)(customer="c-17", status="gold")
            with self.assertRaisesRegex(ValueError, "langgraph_step"):
                self.tool(server)(customer="c-17", status="gold", config={"configurable": {"thread_id": "t"}})
            self.assertEqual([], server.routes, "nothing was begun")

    def test_event_from(self) -> None:
        answers = {"begin": [BEGIN_201], "settle": [{"status": 200, "body": {"key": "K1", "state": "done"}}]}
        with ScriptedServer(TOKEN, answers) as server:
            tool = self.tool(server, event_from=lambda cfg, args: f"run-{cfg['run']}/step-2")
            tool(customer="c-17", status="gold", config={"run": 5})
            self.assertEqual("run-5/step-2", server.sent["begin"][0]["event"])

    def test_refusals_and_rejections(self) -> None:
        answers = {"begin": [{"status": 409, "body": {"key": "K1", "state": "unknown", "next": "a person resolves it at url"}}]}
        with ScriptedServer(TOKEN, answers) as server:
            with self.assertRaisesRegex(InDoubt, "a person resolves it"):
                self.tool(server)(customer="c-17", status="gold", config=config())
            self.assertEqual([], self.calls)

        def refuse(customer: str, status: str) -> None:
            raise Rejected("the CRM refused: no such customer")

        answers = {"begin": [BEGIN_201], "settle": [{"status": 200, "body": {"key": "K1", "state": "failed"}}]}
        with ScriptedServer(TOKEN, answers) as server:
            tool = wrap_tool(Client(server.url, TOKEN), refuse, tool="crm.set_status", target_from=lambda a: subject(a["customer"]))
            with self.assertRaises(Rejected):
                tool(customer="c-17", status="gold", config=config())
            self.assertEqual("failed", server.sent["settle"][0]["outcome"])

    def test_the_signature_a_framework_reads(self) -> None:
        """fn's parameters but the key, keyword-only, and the run's config
        (LangChain injects a RunnableConfig into it)."""
        with ScriptedServer(TOKEN, {}) as server:
            tool = self.tool(server)
            params = inspect.signature(tool).parameters
            self.assertEqual(["customer", "status", "config"], list(params))
            self.assertEqual("set_status", tool.__name__)
            self.assertIn("Set a customer's status", tool.__doc__ or "")

    def test_langgraph_event(self) -> None:
        self.assertEqual("langgraph/t/step-0", langgraph_event({"configurable": {"thread_id": "t"}, "metadata": {"langgraph_step": 0}}, {}))
        self.assertEqual("langgraph/t/outer|tools/step-3", langgraph_event(
            {"configurable": {"thread_id": "t"}, "metadata": {"langgraph_step": 3, "langgraph_checkpoint_ns": "outer:1|tools:2"}}, {}))


if __name__ == "__main__":
    unittest.main()

// Bad input is refused before any request, with one sentence naming the
// field; the LangGraph event is the checkpointed step, never a tool call id.

import { test } from "node:test";
import assert from "node:assert/strict";

import { Client, langGraphEvent, subject } from "../../dist/index.js";

test("the client refuses a server URL that is not http(s), and a missing token", () => {
  assert.throws(() => new Client("127.0.0.1:8080", "t"), /server URL "127.0.0.1:8080" is not an http\(s\) URL/);
  assert.throws(() => new Client("ftp://example.com", "t"), /is not an http\(s\) URL/);
  assert.throws(() => new Client("http://127.0.0.1:8080", " "), /no API token/);
  assert.equal(new Client("http://127.0.0.1:8080/", "t").server, "http://127.0.0.1:8080");
});

test("an intent without event, tool or target, or with a bad lease, is refused naming the field", async () => {
  // Nothing listens on port 9 of this URL: a request would fail otherwise.
  const c = new Client("http://127.0.0.1:9", "t");
  const body = async () => ({ raw: "" });
  const intent = { event: "run-1/step-1", tool: "crm.note", target: subject("c-1"), args: {} };
  await assert.rejects(c.effect({ ...intent, event: "" }, body), /intent\.event is required/);
  await assert.rejects(c.effect({ ...intent, tool: undefined }, body), /intent\.tool is required/);
  await assert.rejects(c.effect({ ...intent, target: { kind: "account", value: "x" } }, body), /intent\.target must be/);
  await assert.rejects(c.effect({ ...intent, leaseSeconds: 0.5 }, body), /intent\.leaseSeconds must be a whole number/);
});

test("a LangGraph call's event is its thread, node path and step: the same when the step runs again", () => {
  const config = (taskId) => ({
    configurable: { thread_id: "thread-9", checkpoint_ns: `tools:${taskId}` },
    metadata: { langgraph_step: 2, langgraph_node: "tools", langgraph_checkpoint_ns: `tools:${taskId}` },
  });
  assert.equal(langGraphEvent(config("5f1c")), "langgraph/thread-9/tools/step-2");
  assert.equal(langGraphEvent(config("other")), langGraphEvent(config("5f1c")));
  assert.equal(langGraphEvent(config("5f1c"), "second"), "langgraph/thread-9/tools/step-2/second");
  const sub = { configurable: { thread_id: "t" }, metadata: { langgraph_step: 4, langgraph_checkpoint_ns: "agent:1a|tools:2b" } };
  assert.equal(langGraphEvent(sub), "langgraph/t/agent|tools/step-4");
  assert.throws(() => langGraphEvent({ metadata: { langgraph_step: 1 } }), /no configurable\.thread_id/);
  assert.throws(() => langGraphEvent({ configurable: { thread_id: "t" } }), /no metadata\.langgraph_step/);
});

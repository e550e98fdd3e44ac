// The client against a real `onceplan serve` (started by the Go driver,
// clients/typescript/node_test.go, which passes its URL, an agent token
// and an outside system counting effects in a synced file).

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, existsSync } from "node:fs";

import { ArgsMismatch, AwaitingApproval, BodyFailed, Client, InDoubt, Rejected, rejected, subject } from "../../dist/index.js";

const env = (name) => {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: run this suite through go test ./clients/typescript/`);
  return v;
};
const client = new Client(env("ONCEPLAN_URL"), env("ONCEPLAN_TOKEN"));

/** effectsAt counts the outside system's applied effects of key, from its synced file. */
function effectsAt(key) {
  const file = env("ONCEPLAN_RECORD");
  if (!existsSync(file)) return 0;
  return readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "" && JSON.parse(l).effect_id === key).length;
}

/** callSink performs the call at the outside system with key as its Idempotency-Key. */
async function callSink(key, signal, target) {
  const res = await fetch(env("ONCEPLAN_SINK"), {
    method: "POST",
    headers: { "Idempotency-Key": key, "Content-Type": "application/json" },
    body: JSON.stringify({ target }),
    signal,
  });
  const raw = await res.text();
  if (res.status !== 200) throw Object.assign(new Error(`the outside system answered HTTP ${res.status}`), { raw });
  return { raw, receipt: JSON.parse(raw).receipt };
}

test("performed once: a second caller meanwhile is told it is in flight, a later one replays; changed args are refused", async () => {
  const intent = { event: "run-1/step-1", tool: "ts.plain", target: subject("customer-17"), args: { status: "gold" }, leaseSeconds: 10 };
  let runs = 0;
  let started;
  const bodyStarted = new Promise((resolve) => (started = resolve));
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const first = client.effect(intent, async (key, signal) => {
    runs++;
    started(performance.now());
    // The body outlives its lease: only heartbeats keep it.
    await Promise.race([finished, new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason), { once: true }))]);
    return callSink(key, signal, "customer-17");
  });
  const at = await bodyStarted;
  // One and a half leases after the body started: the lease would have
  // run out without heartbeats. The lease is long (heartbeats every third
  // of it) so that a machine too busy to answer a heartbeat within a few
  // seconds still keeps it.
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, at + 15000 - performance.now())));
  await assert.rejects(
    client.effect(intent, async () => {
      runs++;
      return { raw: "" };
    }),
    (err) => err instanceof InDoubt && err.effect.state === "pending" && err.effect.next.includes("in flight"),
  );
  finish();
  const done = await first;
  assert.equal(done.performed, true);
  assert.equal(done.effect.state, "done");
  assert.equal(effectsAt(done.effect.key), 1);

  const again = await client.effect(intent, async () => {
    runs++;
    return { raw: "" };
  });
  assert.equal(again.replayed, true);
  assert.equal(again.receipt, done.receipt);
  assert.equal(again.raw, done.raw, "the replay is the outside system's raw answer, as received");
  assert.equal(runs, 1);

  await assert.rejects(
    client.effect({ ...intent, args: { status: "silver" } }, async () => {
      runs++;
      return { raw: "" };
    }),
    (err) => err instanceof ArgsMismatch && err.api.status === 422 && err.api.storedArgsDigest === done.effect.args_digest,
  );
  assert.equal(runs, 1);
  assert.equal(effectsAt(done.effect.key), 1, "exactly one effect at the outside system");
});

test("a rejected body settles failed (the next call performs it); any other error settles unknown, never run again", async () => {
  const intent = { event: "run-2/step-1", tool: "ts.plain", target: subject("c-1"), args: { n: 1 } };
  await assert.rejects(
    client.effect(intent, async () => {
      throw rejected(new Error("the CRM refused the note"), "HTTP/1.1 422 bad note");
    }),
    (err) => err instanceof Rejected && err.effect.state === "failed" && err.message === "the CRM refused the note",
  );
  let bodyFailed;
  await assert.rejects(
    client.effect(intent, async () => {
      throw new Error("timed out");
    }),
    (err) => {
      bodyFailed = err;
      return err instanceof BodyFailed && err.effect.state === "unknown" && err.cause.message === "timed out";
    },
  );
  await assert.rejects(
    client.effect(intent, async () => assert.fail("an unknown call is never run again")),
    (err) => err instanceof InDoubt && err.effect.state === "unknown",
  );
  const now = await client.get(bodyFailed.effect.key);
  assert.equal(now.state, "unknown");
  assert.match(now.next, /a person resolves it/);
});

test("a tool that needs approval performs nothing until a person approves: the refusal names where", async () => {
  await assert.rejects(
    client.effect({ event: "run-3/step-1", tool: "ts.approved", target: subject("c-2"), args: { amount: 5 } }, async () =>
      assert.fail("nothing is performed before the approval"),
    ),
    (err) => err instanceof AwaitingApproval && err.effect.state === "awaiting_approval" && /\/tool-calls\/approvals\//.test(err.effect.approval_url),
  );
});

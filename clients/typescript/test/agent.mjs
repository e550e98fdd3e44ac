// The kill matrix's agent: one tool call through @onceplan/client, as a
// runtime makes it, calling an outside system (a webhook that counts
// effects in a synced file) with the call's key as its Idempotency-Key.
//
// With TA_CRASH it stops at that point of the protocol — after-intent
// (the begin's 201 is in hand), body-started (the outside call not yet
// made), after-call (the outside system answered; no settle yet) — and
// says so on stdout ("CRASHPOINT <point>"), then waits for the driver's
// SIGKILL. Without, it is a restarted runtime: effect() once, and one
// JSON line of what it did.

import { Client, InDoubt, AwaitingApproval, ArgsMismatch, BodyFailed, rejected, subject } from "../dist/index.js";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`agent: ${name} is not set`);
  return v;
};

const crash = process.env.TA_CRASH ?? "";
const client = new Client(env("TA_SERVER"), env("TA_TOKEN"));
const target = env("TA_TARGET");
const intent = {
  event: env("TA_EVENT"),
  tool: env("TA_TOOL"),
  target: subject(target),
  args: { value: `${target}-on` },
  leaseSeconds: Number(process.env.TA_LEASE_SECONDS ?? "3"),
};

/** stopAt says the point is reached and waits to be killed there. */
async function stopAt(point) {
  if (crash !== point) return;
  process.stdout.write(`CRASHPOINT ${point}\n`);
  // Held until the driver's SIGKILL; never resolved.
  await new Promise(() => setInterval(() => {}, 1 << 30));
}

/** call performs the call at the outside system. */
async function call(key, signal) {
  await stopAt("body-started");
  let res;
  try {
    res = await fetch(env("TA_SINK"), {
      method: "POST",
      headers: { "Idempotency-Key": key, "Content-Type": "application/json" },
      body: JSON.stringify({ target }),
      signal,
    });
  } catch (err) {
    throw err; // it may have left: unknown
  }
  const raw = await res.text();
  await stopAt("after-call");
  if (res.status >= 400 && res.status < 500) throw rejected(new Error(`the outside system refused: HTTP ${res.status}`), raw);
  if (res.status !== 200) throw Object.assign(new Error(`the outside system answered HTTP ${res.status}`), { raw });
  return { raw, receipt: JSON.parse(raw).receipt ?? "" };
}

if (crash === "after-intent") {
  const { status, effect } = await client.begin(intent);
  if (status !== 201) {
    process.stderr.write(`agent: begin answered ${status}: ${JSON.stringify(effect)}\n`);
    process.exit(3);
  }
  await stopAt("after-intent");
}

let performed = false;
const out = {};
try {
  const res = await client.effect(intent, (key, signal) => {
    performed = true;
    return call(key, signal);
  });
  Object.assign(out, { replayed: res.replayed, state: res.effect.state, takeover: res.effect.takeover ?? false, key: res.effect.key, receipt: res.receipt, raw: res.raw });
} catch (err) {
  if (err instanceof InDoubt || err instanceof AwaitingApproval || err instanceof ArgsMismatch) {
    out.refused = err.name;
    Object.assign(out, { state: err.effect.state, next: err.effect.next, key: err.effect.key, retry_after: err.effect.retry_after ?? 0 });
  } else if (err instanceof BodyFailed) {
    Object.assign(out, { error: err.message, state: err.effect.state });
  } else {
    out.error = String(err?.stack ?? err);
  }
}
out.performed = performed;
process.stdout.write(JSON.stringify(out) + "\n");

// Run it twice: the first run performs the call (one line in crm.log),
// the second replays the recorded answer and appends nothing.
//
//   ONCEPLAN_TOKEN=… node clients/typescript/examples/set-status.mjs
import { appendFile } from "node:fs/promises";
import { AwaitingApproval, Client, InDoubt, rejected, subject } from "@onceplan/client";

const client = new Client(process.env.ONCEPLAN_SERVER ?? "http://127.0.0.1:8080", process.env.ONCEPLAN_TOKEN ?? "");
try {
  const res = await client.effect(
    // A call of its own: its event is this run's step, never another's.
    { event: "run-44/step-1", tool: "crm.set_status", target: subject("customer-17"), args: { status: "gold" } },
    async (key, signal) => {
      // The outside system: here a file; in real life an HTTP call with
      // the header Idempotency-Key: key, and signal passed to fetch.
      if (signal.aborted) throw rejected(new Error("the lease was lost before the call"));
      const answer = JSON.stringify({ id: "ts-1", customer: "customer-17", status: "gold" });
      await appendFile("crm.log", `${key} ${answer}\n`);
      return { raw: answer, receipt: "ts-1" };
    },
  );
  console.log(res.replayed ? "replayed:" : "performed:", res.receipt, res.raw);
} catch (err) {
  if (err instanceof AwaitingApproval) console.log("a person approves it at", err.effect.approval_url);
  else if (err instanceof InDoubt) console.log("do not call:", err.effect.next);
  else throw err;
}

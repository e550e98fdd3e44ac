// A LangGraph graph whose tool node sets a customer's status at an
// outside system through Onceplan, checkpointed in PostgreSQL. The Go
// driver (clients/typescript/node_test.go) runs it, kills it, and runs it
// again to resume the thread from its checkpoint.
//
// LG_MODE=start runs the thread from the user's message; LG_MODE=resume
// resumes it from its last checkpoint. With LG_CRASH it stops at a point
// — mid-call (the outside system answered; no settle yet) or
// after-settle (the tool's answer is settled at Onceplan, the graph's
// next checkpoint not yet written) — says "CRASHPOINT <point>" on stdout
// and waits for the driver's SIGKILL. Otherwise it prints one JSON line:
// what the graph ended with, or the client's refusal.

import { randomUUID } from "node:crypto";

import { AIMessage, HumanMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { END, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { ToolNode } from "@langchain/langgraph/prebuilt";
import { PostgresSaver } from "@langchain/langgraph-checkpoint-postgres";
import { AwaitingApproval, Client, InDoubt, langGraphTool, subject } from "@onceplan/client";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`graph: ${name} is not set`);
  return v;
};
const crash = process.env.LG_CRASH ?? "";

async function stopAt(point) {
  if (crash !== point) return;
  process.stdout.write(`CRASHPOINT ${point}\n`);
  await new Promise(() => setInterval(() => {}, 1 << 30));
}

const client = new Client(env("ONCEPLAN_URL"), env("ONCEPLAN_TOKEN"));

const setStatus = langGraphTool(
  client,
  { tool: env("LG_TOOL"), target: (input) => subject(input.customer), leaseSeconds: 3 },
  async (input, key, signal) => {
    const res = await fetch(env("LG_SINK"), {
      method: "POST",
      headers: { "Idempotency-Key": key, "Content-Type": "application/json" },
      body: JSON.stringify({ target: input.customer, status: input.status }),
      signal,
    });
    const raw = await res.text();
    await stopAt("mid-call");
    if (res.status !== 200) throw Object.assign(new Error(`the CRM answered HTTP ${res.status}`), { raw });
    return { raw, receipt: JSON.parse(raw).receipt };
  },
);

const crmTool = tool(
  async (input, config) => {
    const answer = await setStatus(input, config);
    await stopAt("after-settle");
    return answer;
  },
  {
    name: "crm_set_status",
    description: "Set a customer's status in the CRM.",
    schema: {
      type: "object",
      properties: { customer: { type: "string" }, status: { type: "string" } },
      required: ["customer", "status"],
    },
  },
);

// The "model": a node that asks for the tool call, with a fresh
// tool_call_id each time it runs, as a model's are.
function plan() {
  return {
    messages: [new AIMessage({ content: "", tool_calls: [{ name: "crm_set_status", args: { customer: env("LG_CUSTOMER"), status: "gold" }, id: randomUUID(), type: "tool_call" }] })],
  };
}

function report(state) {
  const last = state.messages[state.messages.length - 1];
  return { messages: [new AIMessage(`the CRM answered: ${last.content}`)] };
}

const checkpointer = PostgresSaver.fromConnString(env("LG_DATABASE_URL"));
await checkpointer.setup();
const graph = new StateGraph(MessagesAnnotation)
  .addNode("plan", plan)
  // handleToolErrors false: InDoubt stops the run (to be resumed), never
  // reaching the model as an error to call again at a later step.
  .addNode("tools", new ToolNode([crmTool], { handleToolErrors: false }))
  .addNode("report", report)
  .addEdge(START, "plan")
  .addEdge("plan", "tools")
  .addEdge("tools", "report")
  .addEdge("report", END)
  .compile({ checkpointer });

const config = { configurable: { thread_id: env("LG_THREAD") }, durability: "sync" };
const out = {};
try {
  const input = env("LG_MODE") === "start" ? { messages: [new HumanMessage(`make ${env("LG_CUSTOMER")} gold`)] } : null;
  const final = await graph.invoke(input, config);
  const tools = final.messages.filter((m) => m.getType() === "tool");
  Object.assign(out, { final: final.messages[final.messages.length - 1].content, tool_messages: tools.map((m) => m.content) });
} catch (err) {
  if (err instanceof InDoubt || err instanceof AwaitingApproval) {
    Object.assign(out, { refused: err.name, state: err.effect.state, retry_after: err.effect.retry_after ?? 0, next: err.effect.next });
  } else {
    out.error = String(err?.stack ?? err);
  }
}
await checkpointer.end();
process.stdout.write(JSON.stringify(out) + "\n");

// A LangGraph tool whose effect is performed once through Onceplan. The
// event that names the call is the graph's checkpointed step — its
// thread, its node's namespace and its step number, which a graph
// resumed from its checkpoint runs again with the same values — never
// the model's tool_call_id, which a re-run model step draws anew. The
// package does not import LangGraph: it reads the config LangGraph hands
// a tool.

import type { Client } from "./client.js";
import type { BodyAnswer, Intent, Recovery, Target } from "./types.js";

/** The parts of LangGraph's RunnableConfig this helper reads. */
export interface LangGraphConfig {
  configurable?: { thread_id?: string | number; checkpoint_ns?: string; [k: string]: unknown };
  metadata?: { langgraph_step?: number; langgraph_node?: string; langgraph_checkpoint_ns?: string; thread_id?: string; [k: string]: unknown };
  signal?: AbortSignal;
}

/**
 * langGraphEvent is the event of a tool call made while a LangGraph node
 * runs: "langgraph/<thread>/<node path>/step-<n>", plus part when given
 * (to tell apart calls of one tool on one target in one step). It is the
 * same when the graph is resumed from its checkpoint and runs the step
 * again, and new for every later step. A fork of the thread from an
 * earlier checkpoint runs its steps under the same events: a call with
 * the same args replays, one with other args is refused (ArgsMismatch).
 */
export function langGraphEvent(config: LangGraphConfig | undefined, part?: string): string {
  const thread = config?.configurable?.thread_id ?? config?.metadata?.thread_id;
  if (thread === undefined || String(thread) === "") {
    throw new TypeError("onceplan: the LangGraph config has no configurable.thread_id: run the graph with a checkpointer and a thread_id, so a resumed run names its calls as the first did");
  }
  const step = config?.metadata?.langgraph_step;
  if (typeof step !== "number") {
    throw new TypeError("onceplan: the LangGraph config has no metadata.langgraph_step: call the tool from a graph's node, passing the node's config on");
  }
  // The checkpoint namespace names the node (and its parents, in a
  // subgraph), each with its task id: the path without the ids.
  const ns = config?.metadata?.langgraph_checkpoint_ns ?? config?.configurable?.checkpoint_ns ?? config?.metadata?.langgraph_node ?? "";
  const path = ns
    .split("|")
    .map((segment) => segment.split(":")[0])
    .filter((name) => name !== "")
    .join("|");
  let event = path ? `langgraph/${thread}/${path}/step-${step}` : `langgraph/${thread}/step-${step}`;
  if (part) event += `/${part}`;
  return event;
}

/** What langGraphTool needs to name and perform a tool's calls. */
export interface LangGraphToolSpec<I> {
  /** The tool as Onceplan registers it, e.g. crm.set_status. */
  tool: string;
  /** The target a call's input lands on. */
  target: (input: I) => Target;
  /** The args stored beside the key (default: the input). */
  args?: (input: I) => unknown;
  /** Tells apart calls of this tool on one target within one step (default: none). */
  part?: (input: I) => string;
  recovery?: Recovery;
  leaseSeconds?: number;
}

/**
 * langGraphTool makes the function of a LangGraph tool (for
 * `tool(fn, {name, schema})` of @langchain/core) whose effect body runs
 * at most once per checkpointed step: a graph resumed after a crash gets
 * the recorded raw answer instead of calling again. The function resolves
 * to the outside system's raw answer (the tool message's content).
 *
 * InDoubt and AwaitingApproval are thrown: build the ToolNode with
 * `handleToolErrors: false`, so that they stop the run (resume it later
 * from its checkpoint) instead of reaching the model as a tool message —
 * a model told "error" may call again in a later step, which is a new
 * event and a second effect.
 */
export function langGraphTool<I>(
  client: Client,
  spec: LangGraphToolSpec<I>,
  body: (input: I, key: string, signal: AbortSignal) => Promise<BodyAnswer>,
): (input: I, config?: LangGraphConfig) => Promise<string> {
  return async (input: I, config?: LangGraphConfig) => {
    const intent: Intent = {
      event: langGraphEvent(config, spec.part?.(input)),
      tool: spec.tool,
      target: spec.target(input),
      args: spec.args ? spec.args(input) : input,
    };
    if (spec.recovery) intent.recovery = spec.recovery;
    if (spec.leaseSeconds) intent.leaseSeconds = spec.leaseSeconds;
    const res = await client.effect(intent, (key, signal) => body(input, key, signal), config?.signal ? { signal: config.signal } : {});
    return res.raw ?? res.receipt;
  };
}

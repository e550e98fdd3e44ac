// @onceplan/client: an agent's tool calls performed exactly once through
// a running Onceplan (its single-effects API). See client.ts for the
// protocol, langgraph.ts for the LangGraph tool helper.

export { Client, DEFAULT_LEASE_SECONDS } from "./client.js";
export type { CallOptions, SettleParams } from "./client.js";
export { ApiError, ArgsMismatch, AwaitingApproval, BodyFailed, InDoubt, NotPerformed, Rejected, rejected } from "./errors.js";
export { email, subject } from "./types.js";
export type { Body, BodyAnswer, Effect, Intent, Recovery, Result, Target } from "./types.js";
export { langGraphEvent, langGraphTool } from "./langgraph.js";
export type { LangGraphConfig, LangGraphToolSpec } from "./langgraph.js";

// The values of the single-effects API, as it names them on the wire.

/** The resolved identity the effect lands on. */
export interface Target {
  /** "subject" (an opaque id: an account, a record) or "email". */
  kind: "subject" | "email";
  value: string;
}

/** A target named by an opaque id (an account, a record). */
export function subject(id: string): Target {
  return { kind: "subject", value: id };
}

/** A target that is an email address. */
export function email(address: string): Target {
  return { kind: "email", value: address };
}

/** How a tool's attempt whose lease ended without a settle is recovered. */
export type Recovery = "dedupe" | "probe" | "none";

/**
 * One tool call: its identity (whose ledger key names it) and its args
 * (stored and hashed beside the key, never part of it).
 */
export interface Intent {
  /**
   * The run's or trigger's stable occurrence id: the same on a retry or a
   * restart of the same step, new for a new decision (never a model's
   * tool_call_id, which a re-run model step draws anew).
   */
  event: string;
  tool: string;
  target: Target;
  /** The tool's input, sent as JSON. Absent: {}. */
  args?: unknown;
  amountMinor?: number;
  scope?: string;
  /** The tool's recovery as the caller declares it; it must match the registration. */
  recovery?: Recovery;
  /** How long the body has before a heartbeat, in whole seconds (default 60, at most 3600). */
  leaseSeconds?: number;
}

/** The server's answer about a call (the API's SingleEffect). */
export interface Effect {
  key: string;
  epoch: number;
  /** pending, done, failed, unknown, stranded, revoked, awaiting_approval, rejected or new. */
  state: string;
  tool: string;
  event: string;
  target: Target;
  args_digest: string;
  recovery: string;
  approval_required: boolean;
  /** How long the tool's outside system honours a key, from the first call (absent: for ever). */
  dedupe_window_seconds?: number;
  /** How long the tool's outside system can be asked about a call (absent: for ever). */
  probe_retention_seconds?: number;
  args?: unknown;
  key_free?: boolean;
  attempt?: number;
  /** The lease (a 201 and a heartbeat only): settle and heartbeat with it. */
  lease?: string;
  lease_until?: string;
  /** Whole seconds from the answer until lease_until, rounded down (newer servers). */
  lease_seconds?: number;
  takeover?: boolean;
  registered?: boolean;
  receipt?: string;
  /** The latest raw answer recorded, exactly as received. */
  raw?: string | null;
  /** Whose raw answer it is: settle, probe or person (newer servers). */
  raw_source?: string;
  reason?: string;
  resolution?: string;
  resolved_by?: string;
  approved_by?: string;
  approval_url?: string;
  /** The call's page in the web UI, where a person resolves it. */
  url: string;
  /** What happens next, in one sentence. */
  next: string;
  /** Seconds until it is worth asking again. */
  retry_after?: number;
}

/** What effect() did. */
export interface Result {
  /** The server's last answer about the call (the settle's, or the begin's replay). */
  effect: Effect;
  /** The call was done before: nothing was performed now; receipt and raw are the recorded result. */
  replayed: boolean;
  /** This caller ran the body. */
  performed: boolean;
  receipt: string;
  /** The outside system's raw answer (the body's, or the recorded one); null when none was recorded. */
  raw: string | null;
}

/** What a body returns: the outside system's raw answer, and its id for the effect. */
export interface BodyAnswer {
  /** Absent or null: the outside system gave none (settled as ""). */
  raw?: string | Uint8Array | null;
  /** The outside system's id for the effect ("ok" when empty). */
  receipt?: string;
}

/**
 * A body performs the call at the outside system, passing key as its
 * idempotency key (an Idempotency-Key header, an operation id). signal is
 * aborted when the lease is lost: the body must then stop before calling.
 */
export type Body = (key: string, signal: AbortSignal) => Promise<BodyAnswer>;

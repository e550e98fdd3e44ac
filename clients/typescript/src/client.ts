// Client performs an agent's tool calls exactly once through a running
// Onceplan's single-effects API: POST /api/v1/effects (begin), its
// settle, heartbeat and status routes. The protocol is the Go client's
// (clients/go/toolclient): begin commits the intent before the body
// runs; the body runs only when this caller holds the key's lease, with
// heartbeats while it runs; the settle carries the outside system's raw
// answer; a key already done is replayed, never called again.

import { ApiError, ArgsMismatch, AwaitingApproval, BodyFailed, InDoubt, Rejected } from "./errors.js";
import type { Body, BodyAnswer, Effect, Intent, Result } from "./types.js";

/** The lease a begin asks for when the intent names none (the server's default). */
export const DEFAULT_LEASE_SECONDS = 60;

/** How many times a request over the token's rate (429) is sent again. */
const MAX_RATE_LIMITED = 5;

/** How long one request may take before it is given up. */
const REQUEST_TIMEOUT_MS = 60_000;

/** A settle's body. */
export interface SettleParams {
  lease: string;
  outcome: "done" | "failed" | "unknown";
  receipt?: string;
  reason?: string;
  /** The outside system's answer as received; absent sends none (allowed only with unknown). */
  raw?: string | Uint8Array;
}

/** Options of a call: signal cancels it (and a running body). */
export interface CallOptions {
  signal?: AbortSignal;
}

/** An answer with the moment its request was sent (performance.now()). */
interface Answer {
  status: number;
  effect: Effect;
  sent: number;
}

const utf8 = new TextDecoder();

function text(raw: string | Uint8Array): string {
  return typeof raw === "string" ? raw : utf8.decode(raw);
}

/** pathEscape escapes a key for a URL path as Go's url.PathEscape does (":" stays: the server reads keys "v1:…" as they are). */
function pathEscape(key: string): string {
  return encodeURIComponent(key).replace(/%3A/gi, ":");
}

/** sleep resolves after ms, or at once when signal aborts. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const t = setTimeout(done, Math.max(0, ms));
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** anySignal aborts when any of signals does. */
function anySignal(signals: (AbortSignal | undefined)[]): AbortSignal {
  const list = signals.filter((s): s is AbortSignal => s !== undefined);
  const any = (AbortSignal as unknown as { any?: (s: AbortSignal[]) => AbortSignal }).any;
  if (any) return any(list);
  const ac = new AbortController();
  for (const s of list) {
    if (s.aborted) {
      ac.abort(s.reason);
      break;
    }
    s.addEventListener("abort", () => ac.abort(s.reason), { once: true });
  }
  return ac.signal;
}

/**
 * granted is how many seconds of lease an answer gives, counted from the
 * request's send. A server that says (lease_seconds: the whole seconds
 * left when it answered, rounded down) may have granted less than asked;
 * it grants whole seconds from its commit, which came after the send and
 * before the answer, so a lease_seconds of n means at least n+1 were
 * granted from a moment after the send — never more than asked. A server
 * that does not say granted what was asked.
 */
function granted(answer: Effect, asked: number): number {
  const left = answer.lease_seconds;
  if (typeof left !== "number" || !Number.isFinite(left) || left < 0) return asked;
  return Math.min(asked, left + 1);
}

/** checkIntent refuses bad input with one sentence naming the field. */
function checkIntent(intent: Intent): void {
  const nonEmpty = (v: unknown) => typeof v === "string" && v.trim() !== "";
  if (!nonEmpty(intent?.event)) throw new TypeError("onceplan: intent.event is required: the run's or trigger's stable occurrence id");
  if (!nonEmpty(intent.tool)) throw new TypeError("onceplan: intent.tool is required: the tool's registered name, e.g. crm.set_status");
  if (!intent.target || (intent.target.kind !== "subject" && intent.target.kind !== "email") || !nonEmpty(intent.target.value)) {
    throw new TypeError('onceplan: intent.target must be {kind: "subject" or "email", value: a non-empty string}; use subject(id) or email(address)');
  }
  const lease = intent.leaseSeconds;
  if (lease !== undefined && (!Number.isInteger(lease) || lease < 1 || lease > 3600)) {
    throw new TypeError("onceplan: intent.leaseSeconds must be a whole number of seconds from 1 to 3600");
  }
}

/**
 * Client calls one Onceplan server with one API token (an agent token is
 * enough: agents may begin, heartbeat, settle and read).
 */
export class Client {
  /** The base URL, e.g. http://127.0.0.1:8080, without a trailing slash. */
  readonly server: string;
  readonly #token: string;

  constructor(server: string, token: string) {
    let u: URL | undefined;
    try {
      u = new URL(server);
    } catch {
      u = undefined;
    }
    if (!u || (u.protocol !== "http:" && u.protocol !== "https:") || u.host === "") {
      throw new TypeError(`onceplan: the server URL ${JSON.stringify(server)} is not an http(s) URL like http://127.0.0.1:8080`);
    }
    if (typeof token !== "string" || token.trim() === "") {
      throw new TypeError("onceplan: no API token (create one with `onceplan token create --agent`)");
    }
    this.server = server.replace(/\/+$/, "");
    this.#token = token.trim();
  }

  /**
   * effect performs the call intent names once: begin; then, only when
   * this caller holds the lease, body (heartbeating meanwhile) and the
   * settle with its answer. A key already done resolves to its recorded
   * result (replayed) without running body. In doubt, awaiting approval
   * and args mismatch reject with InDoubt, AwaitingApproval and
   * ArgsMismatch without running it. An error of a body that ran is
   * thrown after its outcome is settled: rejected(err) as failed (the key
   * is free), any other as unknown.
   */
  async effect(intent: Intent, body: Body, options: CallOptions = {}): Promise<Result> {
    checkIntent(intent);
    const asked = intent.leaseSeconds ?? DEFAULT_LEASE_SECONDS;
    const begun = await this.#begin(intent, options.signal);
    const eff = begun.effect;
    switch (begun.status) {
      case 200:
        return { effect: eff, replayed: true, performed: false, receipt: eff.receipt ?? "", raw: eff.raw ?? null };
      case 202:
        throw new AwaitingApproval(`onceplan: the call awaits a person's approval at ${eff.approval_url ?? eff.url}: ${eff.next}`, eff);
      case 409:
        throw new InDoubt(`onceplan: the call was not performed (in doubt, state ${eff.state}): ${eff.next}`, eff);
    }
    // 201: the lease is ours from when the begin was sent (the server's
    // lease runs from its commit, later), so a local deadline counted
    // from the send is never past the server's.
    let deadline = begun.sent + 1000 * granted(eff, asked);
    const lease = eff.lease ?? "";
    const stop = new AbortController();
    const bodySignal = anySignal([stop.signal, options.signal]);
    const heartbeats = this.#heartbeat(eff, asked, () => deadline, (d) => (deadline = d), stop, bodySignal);

    let answer: BodyAnswer | undefined;
    let bodyError: unknown;
    let started = false;
    if (performance.now() >= deadline) {
      // Never start a call after the lease: another caller may own it.
      bodyError = new InDoubt("onceplan: the lease ended before the body could start (nothing was performed)", eff);
    } else {
      started = true;
      try {
        answer = await body(eff.key, bodySignal);
      } catch (err) {
        bodyError = err;
      }
    }
    stop.abort();
    await heartbeats;

    let outcome: SettleParams["outcome"] = "done";
    let reason = "";
    let raw: string | undefined = answer?.raw == null ? undefined : text(answer.raw);
    let receipt = answer?.receipt?.trim() ?? "";
    if (!started) {
      outcome = "failed";
      reason = (bodyError as Error).message;
    } else if (bodyError instanceof Rejected) {
      outcome = "failed";
      reason = bodyError.message;
      raw = bodyError.raw === undefined ? undefined : text(bodyError.raw);
    } else if (bodyError !== undefined) {
      outcome = "unknown";
      reason = bodyError instanceof Error ? bodyError.message : String(bodyError);
      const r = (bodyError as { raw?: unknown } | null)?.raw;
      raw = typeof r === "string" || r instanceof Uint8Array ? text(r) : undefined;
    } else if (receipt === "") {
      receipt = "ok";
    }
    if (raw === undefined && outcome !== "unknown") raw = "";

    let settled: Effect;
    try {
      settled = await this.#settleRetrying(eff.key, { lease, outcome, receipt, reason, raw });
    } catch (settleError) {
      if (bodyError !== undefined) throw new AggregateError([bodyError, settleError], `onceplan: the body failed (${reason}) and its settle failed too`);
      throw settleError;
    }
    // The settle's answer, with what the begin said of this attempt.
    settled = { ...settled, takeover: eff.takeover ?? false, lease };
    if (bodyError instanceof Rejected) {
      bodyError.effect = settled;
      throw bodyError;
    }
    if (bodyError instanceof InDoubt) {
      // The lease was lost (or never there): the body stopped.
      throw new InDoubt(bodyError.message, settled, { cause: bodyError });
    }
    if (bodyError !== undefined) throw new BodyFailed(bodyError, settled);
    if (settled.state === "unknown" && outcome !== "unknown") {
      // The lease ended before the settle and recovery left the call for
      // a person, who has this answer beside it.
      throw new InDoubt(
        `onceplan: the lease ended before the settle, so the call stays unknown until a person resolves it (the answer is recorded for them): ${settled.next}`,
        settled,
      );
    }
    return { effect: settled, replayed: false, performed: true, receipt, raw: raw ?? null };
  }

  /**
   * heartbeat extends the lease every third of it while the body runs,
   * and aborts stop when the lease is lost (refused) or its local deadline
   * passes without a successful heartbeat.
   */
  async #heartbeat(
    eff: Effect,
    asked: number,
    deadline: () => number,
    setDeadline: (d: number) => void,
    stop: AbortController,
    running: AbortSignal,
  ): Promise<void> {
    try {
      await this.#heartbeats(eff, asked, deadline, setDeadline, stop, running);
    } catch (err) {
      // Never a body running without its lease kept: stop it.
      stop.abort(new InDoubt(`onceplan: the heartbeats stopped: ${(err as Error)?.message ?? err}`, eff));
    }
  }

  async #heartbeats(
    eff: Effect,
    asked: number,
    deadline: () => number,
    setDeadline: (d: number) => void,
    stop: AbortController,
    running: AbortSignal,
  ): Promise<void> {
    const every = Math.max((asked * 1000) / 3, 200);
    while (!running.aborted) {
      await sleep(Math.min(every, deadline() - performance.now()), running);
      if (running.aborted) return;
      if (performance.now() >= deadline()) {
        stop.abort(new InDoubt("onceplan: the lease ended without a heartbeat", eff));
        return;
      }
      // Never waiting (out a 429) past the local deadline: then the body must stop.
      const left = AbortSignal.timeout(Math.max(1, Math.ceil(deadline() - performance.now())));
      try {
        const { effect: hb, sent } = await this.#call("POST", `/effects/${pathEscape(eff.key)}/heartbeat`,
          { lease: eff.lease, lease_seconds: asked }, [200], anySignal([running, left]));
        setDeadline(sent + 1000 * granted(hb, asked));
      } catch (err) {
        if (err instanceof ApiError && err.status === 409) {
          stop.abort(new InDoubt(`onceplan: the lease was lost: ${err.message}`, eff));
          return;
        }
        // Anything else (the network, a timeout): try again until the deadline.
      }
    }
  }

  /** settleRetrying settles, again after a transport error (a settle that committed answers the same when repeated). */
  async #settleRetrying(key: string, p: SettleParams): Promise<Effect> {
    let last: unknown;
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        return await this.settle(key, p);
      } catch (err) {
        if (err instanceof ApiError) throw err;
        last = err;
      }
      await sleep((attempt + 1) * 200);
    }
    throw last;
  }

  /**
   * begin commits intent and resolves to the server's status and answer:
   * 201 (this caller holds effect.lease and may perform it), 200 done, 202
   * awaiting approval, 409 in doubt. A 422 rejects with ArgsMismatch,
   * other failures with ApiError.
   */
  async begin(intent: Intent, options: CallOptions = {}): Promise<{ status: number; effect: Effect }> {
    checkIntent(intent);
    const { status, effect } = await this.#begin(intent, options.signal);
    return { status, effect };
  }

  async #begin(intent: Intent, signal?: AbortSignal): Promise<Answer> {
    const body: Record<string, unknown> = {
      event: intent.event,
      tool: intent.tool,
      target: intent.target,
      args: intent.args ?? {},
      lease_seconds: intent.leaseSeconds ?? DEFAULT_LEASE_SECONDS,
    };
    if (intent.amountMinor) body.amount_minor = intent.amountMinor;
    if (intent.scope) body.scope = intent.scope;
    if (intent.recovery) body.recovery = intent.recovery;
    try {
      return await this.#call("POST", "/effects", body, [200, 201, 202, 409], signal);
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) {
        const b = (err.body ?? {}) as { key?: string; args_digest?: string };
        throw new ArgsMismatch(err, {
          key: b.key ?? "", event: intent.event, tool: intent.tool, target: intent.target, args_digest: b.args_digest ?? "",
          next: "the key is bound to other args: begin the changed call under a new event id",
        } as Effect);
      }
      throw err;
    }
  }

  /** settle reports the call's outcome with its raw answer. */
  async settle(key: string, p: SettleParams, options: CallOptions = {}): Promise<Effect> {
    const body: Record<string, unknown> = { lease: p.lease, outcome: p.outcome };
    if (p.receipt) body.receipt = p.receipt;
    if (p.reason) body.reason = p.reason;
    if (p.raw !== undefined) body.raw = text(p.raw);
    return (await this.#call("POST", `/effects/${pathEscape(key)}/settle`, body, [200], options.signal)).effect;
  }

  /** heartbeat extends the lease to leaseSeconds from now. */
  async heartbeat(key: string, lease: string, leaseSeconds: number, options: CallOptions = {}): Promise<Effect> {
    return (await this.#call("POST", `/effects/${pathEscape(key)}/heartbeat`, { lease, lease_seconds: leaseSeconds }, [200], options.signal)).effect;
  }

  /**
   * get reads the call's state now; with waitSeconds (newer servers), a
   * call that is pending, unknown or awaiting approval is answered when
   * its state changes or when the wait passes (a server without the long
   * poll answers at once).
   */
  async get(key: string, options: CallOptions & { waitSeconds?: number } = {}): Promise<Effect> {
    const wait = options.waitSeconds ? `?wait=${Math.min(60, Math.max(0, Math.floor(options.waitSeconds)))}s` : "";
    return (await this.#call("GET", `/effects/${pathEscape(key)}${wait}`, undefined, [200], options.signal)).effect;
  }

  /**
   * call performs one request and resolves an answer with one of the ok
   * statuses; any other rejects with ApiError. A 429 (the token's rate
   * limit) is answered before the request is carried out, so it is sent
   * again after the Retry-After the server asks for, a few times.
   */
  async #call(method: string, path: string, body: unknown, ok: number[], signal?: AbortSignal): Promise<Answer> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    for (let attempt = 1; ; attempt++) {
      const sent = performance.now();
      const headers: Record<string, string> = { Authorization: `Bearer ${this.#token}`, Accept: "application/json" };
      if (payload !== undefined) headers["Content-Type"] = "application/json";
      const res = await fetch(`${this.server}/api/v1${path}`, {
        method,
        headers,
        body: payload,
        signal: anySignal([signal, AbortSignal.timeout(REQUEST_TIMEOUT_MS)]),
      });
      const raw = await res.text();
      if (ok.includes(res.status)) {
        try {
          return { status: res.status, effect: JSON.parse(raw) as Effect, sent };
        } catch (err) {
          throw new Error(`onceplan answered HTTP ${res.status} with a body that is not its JSON: ${(err as Error).message}`);
        }
      }
      const apiError = toApiError(res.status, raw);
      if (res.status !== 429 || attempt === MAX_RATE_LIMITED) throw apiError;
      const secs = Number.parseInt(res.headers.get("Retry-After") ?? "", 10);
      await sleep(secs > 0 && secs <= 60 ? secs * 1000 : 1000, signal);
      if (signal?.aborted) throw apiError;
    }
  }
}

/** toApiError reads an error answer of the API (or any other body). */
function toApiError(status: number, raw: string): ApiError {
  try {
    const e = JSON.parse(raw) as { error?: { code?: string; message?: string; field?: string }; stored_args_digest?: string };
    if (e?.error?.message) {
      return new ApiError(status, e.error.code ?? "", e.error.message, e.error.field ?? "", e.stored_args_digest ?? "", e);
    }
  } catch {
    // not the API's JSON: the body as it is
  }
  return new ApiError(status, "http", raw.trim());
}


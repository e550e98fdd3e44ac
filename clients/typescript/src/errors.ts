// The errors of the client: why a body was not run (NotPerformed and its
// three kinds), an answer of the API that is an error (ApiError), and
// the wrapper a body throws when nothing happened at the outside system
// (rejected).

import type { Effect } from "./types.js";

/** An error answer of the API (any status the call did not expect). */
export class ApiError extends Error {
  override name = "ApiError";
  /** The HTTP status. */
  readonly status: number;
  /** The API's error code, e.g. "invalid", "forbidden", "args_mismatch". */
  readonly code: string;
  /** The field a validation error names, when it names one. */
  readonly field: string;
  /** On 422: the digest of the args the key is bound to. */
  readonly storedArgsDigest: string;
  /** The answer's JSON, when it was JSON. */
  readonly body: unknown;

  constructor(status: number, code: string, message: string, field = "", storedArgsDigest = "", body: unknown = undefined) {
    super(`onceplan: ${message} (HTTP ${status} ${code})`);
    this.status = status;
    this.code = code;
    this.field = field;
    this.storedArgsDigest = storedArgsDigest;
    this.body = body;
  }
}

/**
 * The client's refusal to run a body: the call was not performed by this
 * caller. `effect` is the server's answer (its `next` says what happens
 * next). Test for the kind with `instanceof InDoubt` (and the others).
 */
export class NotPerformed extends Error {
  override name = "NotPerformed";
  readonly effect: Effect;

  constructor(message: string, effect: Effect, options?: { cause?: unknown }) {
    super(message, options);
    this.effect = effect;
  }
}

/**
 * Another caller holds the key, or the call's outcome is unknown: do not
 * perform it. `effect.next` says what happens next and `effect.retry_after`
 * when it is worth asking again.
 */
export class InDoubt extends NotPerformed {
  override name = "InDoubt";
}

/** A person must approve these exact args first, at `effect.approval_url`. */
export class AwaitingApproval extends NotPerformed {
  override name = "AwaitingApproval";
}

/**
 * The key is bound to other args (a changed call under the same event
 * id): give the new call a new event id. `api` is the 422 answer, with
 * the stored args' digest.
 */
export class ArgsMismatch extends NotPerformed {
  override name = "ArgsMismatch";
  readonly api: ApiError;

  constructor(api: ApiError, effect: Effect) {
    super(api.message, effect, { cause: api });
    this.api = api;
  }
}

/**
 * A body's error that says the outside system definitely did not perform
 * the call (it refused it, or the request never left). Throw
 * `rejected(err)` from a body: the client settles the call as failed,
 * which frees the key. Any other error a body throws is settled as
 * unknown — it may or may not have happened — and is never run again
 * blindly.
 */
export class Rejected extends Error {
  override name = "Rejected";
  /** The outside system's answer, as received, when there was one. */
  readonly raw: string | Uint8Array | undefined;
  /** Once effect() settled it: the server's answer (state failed). */
  effect: Effect | undefined;

  constructor(cause: unknown, raw?: string | Uint8Array) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.raw = raw;
  }
}

/**
 * A body's error other than rejected(): the call may or may not have
 * happened, so effect() settled it as unknown (`effect`, the settle's
 * answer, says what happens next) and throws this, with the body's error
 * as `cause`. A body's error with a `raw` property (a string or bytes) is
 * settled with that raw answer.
 */
export class BodyFailed extends Error {
  override name = "BodyFailed";
  readonly effect: Effect;

  constructor(cause: unknown, effect: Effect) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.effect = effect;
  }
}

/** rejected(err, raw?) marks a body's error as "failed, nothing happened". */
export function rejected(err: unknown, raw?: string | Uint8Array): Rejected {
  return new Rejected(err, raw);
}

// The shared table of scripted server answers (clients/testdata/cases.json,
// described by clients/testdata/README.md) run against Client.effect: one
// scripted HTTP server on 127.0.0.1:0 per case, the client pointed at it,
// the body doing what the case says, and the outcome checked.

import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { ApiError, ArgsMismatch, AwaitingApproval, BodyFailed, Client, InDoubt, Rejected, rejected } from "../../dist/index.js";

const tablePath = process.env.ONCEPLAN_CASES ?? fileURLToPath(new URL("../../../testdata/cases.json", import.meta.url));
const table = JSON.parse(readFileSync(tablePath, "utf8"));
assert.equal(table.version, 1, `${tablePath}: this suite reads version 1 of the table`);
assert.ok(table.cases.length > 0, `${tablePath} has no cases`);

/** fill replaces each "{{now±Ns}}" string of v with that time, RFC 3339. */
function fill(v) {
  if (typeof v === "string") {
    const m = /^\{\{now([+-]\d+)s\}\}$/.exec(v);
    return m ? new Date(Date.now() + Number(m[1]) * 1000).toISOString() : v;
  }
  if (Array.isArray(v)) return v.map(fill);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, e]) => [k, fill(e)]));
  return v;
}

/** subset lists how got differs from want (null: absent; "~x": contains x). */
function subset(path, want, got) {
  if (want && typeof want === "object" && !Array.isArray(want)) {
    if (!got || typeof got !== "object") return [`${path}: got ${JSON.stringify(got)}, want an object`];
    const diffs = [];
    for (const [k, wv] of Object.entries(want)) {
      const gv = got[k];
      if (wv === null) {
        if (gv !== undefined && gv !== null) diffs.push(`${path}.${k}: got ${JSON.stringify(gv)}, want it absent`);
        continue;
      }
      if (gv === undefined) {
        diffs.push(`${path}.${k}: absent, want ${JSON.stringify(wv)}`);
        continue;
      }
      diffs.push(...subset(`${path}.${k}`, wv, gv));
    }
    return diffs;
  }
  if (typeof want === "string" && want.startsWith("~")) {
    return typeof got === "string" && got.includes(want.slice(1)) ? [] : [`${path}: ${JSON.stringify(got)} does not contain ${JSON.stringify(want.slice(1))}`];
  }
  return JSON.stringify(want) === JSON.stringify(got) ? [] : [`${path}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`];
}

/** scriptedServer answers each route with the case's answers in order and records what the client sent. */
async function scriptedServer(token, answers) {
  const s = { served: {}, routes: [], sent: {}, beats: 0, errs: [], beatWaiters: [] };
  const beginKey = (answers.begin ?? []).map((a) => a.body?.key).find((k) => typeof k === "string") ?? "";
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks).toString("utf8");
    if (req.headers.authorization !== `Bearer ${token}`) s.errs.push(`${req.method} ${req.url}: Authorization ${req.headers.authorization}, want the bearer token`);
    const url = new URL(req.url, "http://x");
    let route = "";
    let key = "";
    const m = /^\/api\/v1\/effects\/([^/]+)(\/settle|\/heartbeat)?$/.exec(url.pathname);
    if (req.method === "POST" && url.pathname === "/api/v1/effects") route = "begin";
    else if (m && req.method === "POST" && m[2]) [route, key] = [m[2].slice(1), decodeURIComponent(m[1])];
    else if (m && req.method === "GET" && !m[2]) [route, key] = ["get", decodeURIComponent(m[1])];
    else {
      s.errs.push(`unexpected request ${req.method} ${req.url}`);
      res.writeHead(404).end("no such route");
      return;
    }
    if (key !== "" && key !== beginKey) s.errs.push(`${route} of key ${JSON.stringify(key)}, want the begin's key ${JSON.stringify(beginKey)}`);
    if (raw.length > 0) {
      try {
        (s.sent[route] ??= []).push(JSON.parse(raw));
      } catch {
        s.errs.push(`${route}: the body is not JSON: ${raw}`);
      }
    }
    if (route !== "heartbeat") s.routes.push(route);
    const list = answers[route] ?? [];
    const n = s.served[route] ?? 0;
    s.served[route] = n + 1;
    if (list.length === 0) {
      s.errs.push(`the case scripts no answer to ${route}`);
      res.writeHead(500, { "Content-Type": "application/json" }).end(JSON.stringify({ error: { code: "unscripted", message: `the case scripts no answer to ${route}` } }));
      return;
    }
    const a = list[Math.min(n, list.length - 1)];
    if (a.drop) {
      req.socket.destroy();
      return;
    }
    const headers = { ...(a.headers ?? {}) };
    if (a.text !== undefined) {
      res.writeHead(a.status, { ...headers, "Content-Type": "text/plain" }).end(a.text);
    } else {
      res.writeHead(a.status, { ...headers, "Content-Type": "application/json" }).end(JSON.stringify(fill(a.body)));
    }
    if (route === "heartbeat") {
      s.beats++;
      for (const w of s.beatWaiters.splice(0)) w();
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  s.url = `http://127.0.0.1:${server.address().port}`;
  s.close = () => new Promise((resolve) => server.close(resolve) && server.closeAllConnections());
  /** untilBeats resolves once n heartbeats were answered, or rejects when signal aborts. */
  s.untilBeats = (n, signal) =>
    new Promise((resolve, reject) => {
      const check = () => {
        if (s.beats >= n) return resolve();
        if (signal.aborted) return reject(signal.reason);
        s.beatWaiters.push(check);
      };
      signal.addEventListener("abort", () => reject(signal.reason), { once: true });
      check();
    });
  return s;
}

/** outcomeOf names what effect() did in the table's words. */
function outcomeOf(result, err) {
  if (err instanceof ArgsMismatch) return "args_mismatch";
  if (err instanceof AwaitingApproval) return "awaiting_approval";
  if (err instanceof InDoubt) return "in_doubt";
  if (err instanceof ApiError) return "api_error";
  if (err instanceof Rejected) return "rejected";
  if (err instanceof BodyFailed) return "body_error";
  if (err) return `error: ${err}`;
  return result.replayed ? "replayed" : "performed";
}

for (const tc of table.cases) {
  test(tc.name, { concurrency: true, timeout: 60_000 }, async () => {
    const srv = await scriptedServer(table.token, tc.server);
    const client = new Client(srv.url, table.token);
    const intent = { event: tc.intent.event, tool: tc.intent.tool, target: tc.intent.target, args: tc.intent.args };
    if (tc.intent.lease_seconds) intent.leaseSeconds = tc.intent.lease_seconds;
    let runs = 0;
    let result;
    let err;
    try {
      result = await client.effect(intent, async (key, signal) => {
        runs++;
        assert.equal(typeof key, "string");
        if (tc.body.wait_lease_lost) {
          await new Promise((resolve) => (signal.aborted ? resolve() : signal.addEventListener("abort", resolve, { once: true })));
          throw signal.reason;
        }
        if (tc.body.wait_heartbeats) await srv.untilBeats(tc.body.wait_heartbeats, signal);
        const raw = tc.body.raw ?? undefined;
        if (tc.body.error?.kind === "rejected") throw rejected(new Error(tc.body.error.message), raw);
        if (tc.body.error) throw Object.assign(new Error(tc.body.error.message), raw === undefined ? {} : { raw });
        return { raw, receipt: tc.body.receipt };
      });
    } catch (e) {
      err = e;
    }
    await srv.close();

    const want = tc.expect;
    assert.equal(outcomeOf(result, err), want.outcome, `${tc.about}\nerror: ${err?.stack ?? err}`);
    assert.equal(runs, want.body_runs, "the body's runs");
    assert.deepEqual(srv.errs, [], "the requests");
    assert.deepEqual(srv.routes, want.requests, "the requests but heartbeats, in order");
    assert.ok(srv.beats >= (want.min_heartbeats ?? 0), `heartbeats: ${srv.beats}, want at least ${want.min_heartbeats}`);
    if (want.status) assert.equal(err?.status, want.status, "the API error's status");
    if (want.error_contains) assert.ok(String(err?.message).includes(want.error_contains), `the error ${JSON.stringify(err?.message)} does not contain ${JSON.stringify(want.error_contains)}`);
    if (want.stored_args_digest) assert.equal(err.api.storedArgsDigest, want.stored_args_digest);
    if (want.receipt !== undefined) assert.equal(result?.receipt, want.receipt, "the receipt");
    if (want.raw !== undefined) assert.equal(result?.raw, want.raw, "the raw answer");
    if (want.effect) assert.deepEqual(subset("effect", want.effect, result?.effect ?? err?.effect), []);
    for (const [route, w] of Object.entries(want.sent ?? {})) {
      assert.ok((srv.sent[route] ?? []).length > 0, `no ${route} was sent`);
      for (const got of srv.sent[route]) assert.deepEqual(subset(route, w, got), []);
    }
  });
}

"""clients/testdata/cases.json (shared with the Go and TypeScript
clients' suites) against the client, as a context manager and as a
decorator."""

from __future__ import annotations

import unittest
from typing import Any, Callable

from onceplan import (
    APIError,
    ArgsMismatch,
    AwaitingApproval,
    Call,
    Client,
    InDoubt,
    Rejected,
    Result,
    Target,
)

from .scripted import ScriptedServer, load_cases, subset


class BodyFailure(Exception):
    """The body's own error (neither Rejected nor the client's)."""


def make_body(case: dict[str, Any], server: ScriptedServer, runs: list[int]) -> Callable[[Call], Any]:
    spec = case["body"]

    def body(call: Call) -> Any:
        runs[0] += 1
        if spec.get("wait_lease_lost"):
            if not call.lost.wait(30):
                raise AssertionError("the lease was not lost within 30s")
            call.check()
            raise AssertionError("check() did not raise on a lost lease")
        n = spec.get("wait_heartbeats", 0)
        if n and not server.wait_beats(n, 30):
            raise AssertionError(f"{n} heartbeats were not answered within 30s")
        err = spec.get("error")
        if err and err["kind"] == "rejected":
            raise Rejected(err["message"], raw=spec.get("raw"))
        if err:
            raise BodyFailure(err["message"])
        return spec.get("raw"), spec.get("receipt", "")

    return body


def outcome_of(err: BaseException | None, result: Result | None) -> str:
    if isinstance(err, AwaitingApproval):
        return "awaiting_approval"
    if isinstance(err, ArgsMismatch):
        return "args_mismatch"
    if isinstance(err, InDoubt):
        return "in_doubt"
    if isinstance(err, APIError):
        return "api_error"
    if isinstance(err, Rejected):
        return "rejected"
    if isinstance(err, BodyFailure):
        return "body_error"
    if err is not None:
        return f"error: {err!r}"
    assert result is not None
    return "replayed" if result.replayed else "performed"


class SharedCases(unittest.TestCase):
    def run_case(self, case: dict[str, Any], token: str, mode: str) -> None:
        intent = case["intent"]
        with ScriptedServer(token, case["server"]) as server:
            client = Client(server.url, token)
            kw: dict[str, Any] = {}
            if "lease_seconds" in intent:
                kw["lease_seconds"] = intent["lease_seconds"]
            tc = client.effect(intent["event"], intent["tool"], Target(**intent["target"]), intent["args"], **kw)
            runs = [0]
            body = make_body(case, server, runs)
            err: BaseException | None = None
            result: Result | None = None
            call: Call | None = None
            try:
                if mode == "with":
                    with tc as call:
                        if call.perform:
                            raw, receipt = body(call)
                            call.answer(raw, receipt)
                    result = call.result
                else:
                    result = tc(body)()
            except Exception as e:
                err = e
            if result is None and call is not None:
                result = call.result
            if result is None and err is not None:
                result = getattr(err, "onceplan_result", None)
            want = case["expect"]
            self.assertEqual(want["outcome"], outcome_of(err, result), f"{case['about']}\nraised: {err!r}")
            self.assertEqual(want["body_runs"], runs[0], "the body's runs")
            with server.lock:
                self.assertEqual([], server.errors, "the requests")
                self.assertEqual(want["requests"], server.routes, "the requests but heartbeats, in order")
                self.assertGreaterEqual(server.beats, want.get("min_heartbeats", 0), "heartbeats")
                for route, w in (want.get("sent") or {}).items():
                    self.assertTrue(server.sent.get(route), f"no {route} was sent")
                    for got in server.sent[route]:
                        self.assertEqual([], subset(route, w, got))
            if "status" in want:
                self.assertIsInstance(err, APIError)
                assert isinstance(err, APIError)
                self.assertEqual(want["status"], err.status)
            if "error_contains" in want:
                self.assertIn(want["error_contains"], str(err))
            if "stored_args_digest" in want:
                assert isinstance(err, ArgsMismatch)
                self.assertEqual(want["stored_args_digest"], err.stored_args_digest)
            if "receipt" in want:
                assert result is not None
                self.assertEqual(want["receipt"], result.receipt, "the receipt")
            if "raw" in want:
                assert result is not None
                self.assertEqual(want["raw"], result.raw, "the raw answer")
            if "effect" in want:
                if isinstance(err, (AwaitingApproval, InDoubt)) and err.effect.data:
                    got = err.effect.data
                else:
                    assert result is not None, f"no result: {err!r}"
                    got = result.effect.data
                self.assertEqual([], subset("effect", want["effect"], got))

    def test_cases(self) -> None:
        doc = load_cases()
        for case in doc["cases"]:
            for mode in ("with", "decorator"):
                with self.subTest(case=case["name"], mode=mode):
                    self.run_case(case, doc["token"], mode)


if __name__ == "__main__":
    unittest.main()

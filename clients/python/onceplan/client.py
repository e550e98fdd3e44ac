"""The Onceplan client: an agent's tool calls performed exactly once.

The protocol (the Go client, clients/go/toolclient, is the reference):
begin commits the intent before the tool body runs; the body runs only
when this caller holds the key's lease (201); a heartbeat thread extends
the lease while it runs; the settle reports the outside system's raw
answer. 200 replays the recorded result without running the body; 202
(awaiting approval), 409 (in doubt) and 422 (args mismatch) refuse it.
"""

from __future__ import annotations

from email.utils import parsedate_to_datetime
import functools
import http.client
import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Callable, Mapping, TypeVar, Union

__all__ = [
    "Answer",
    "APIError",
    "ArgsMismatch",
    "AwaitingApproval",
    "Call",
    "Client",
    "Effect",
    "InDoubt",
    "NotPerformed",
    "OnceplanError",
    "Rejected",
    "Result",
    "Target",
    "ToolCall",
    "email",
    "subject",
]

DEFAULT_LEASE_SECONDS = 60
# A heartbeat goes every third of the lease, never more often than this.
MIN_HEARTBEAT_EVERY = 0.2
# How many times a request waits out a 429 before it raises it.
MAX_RATE_LIMITED = 5
# How many times a settle is sent after a transport error.
SETTLE_TRIES = 5


@dataclass(frozen=True)
class Target:
    """The resolved identity the effect lands on."""

    kind: str  # "subject" or "email"
    value: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "value": self.value}


def subject(id: str) -> Target:
    """A target named by an opaque id (an account, a record)."""
    return Target("subject", id)


def email(addr: str) -> Target:
    """A target that is an email address."""
    return Target("email", addr)


TargetLike = Union[Target, Mapping[str, str], tuple[str, str]]


def _target(t: TargetLike) -> Target:
    if isinstance(t, Target):
        return t
    if isinstance(t, tuple) and len(t) == 2:
        return Target(str(t[0]), str(t[1]))
    if isinstance(t, Mapping) and "kind" in t and "value" in t:
        return Target(str(t["kind"]), str(t["value"]))
    raise TypeError(f"target must be a Target (subject(id) or email(addr)), not {t!r}")


@dataclass
class Effect:
    """The server's answer about a call (the API's SingleEffect).

    ``data`` is the whole answer as sent, for fields this class does not
    name.
    """

    key: str = ""
    epoch: int = 0
    state: str = ""
    tool: str = ""
    event: str = ""
    args_digest: str = ""
    recovery: str = ""
    approval_required: bool = False
    attempt: int = 0
    lease: str = ""
    lease_until: str | None = None
    lease_seconds: int | None = None
    takeover: bool = False
    receipt: str = ""
    raw: str | None = None
    raw_source: str | None = None
    reason: str = ""
    approval_url: str = ""
    url: str = ""
    next: str = ""
    retry_after: int = 0
    data: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Effect:
        def s(k: str) -> str:
            v = data.get(k)
            return v if isinstance(v, str) else ""

        def i(k: str) -> int:
            v = data.get(k)
            return v if isinstance(v, int) and not isinstance(v, bool) else 0

        lease_seconds = data.get("lease_seconds")
        raw = data.get("raw")
        return cls(
            key=s("key"), epoch=i("epoch"), state=s("state"), tool=s("tool"), event=s("event"),
            args_digest=s("args_digest"), recovery=s("recovery"),
            approval_required=bool(data.get("approval_required")), attempt=i("attempt"), lease=s("lease"),
            lease_until=data.get("lease_until") if isinstance(data.get("lease_until"), str) else None,
            lease_seconds=lease_seconds if isinstance(lease_seconds, int) and lease_seconds > 0 else None,
            takeover=bool(data.get("takeover")), receipt=s("receipt"),
            raw=raw if isinstance(raw, str) else None,
            raw_source=data.get("raw_source") if isinstance(data.get("raw_source"), str) else None,
            reason=s("reason"), approval_url=s("approval_url"), url=s("url"), next=s("next"),
            retry_after=i("retry_after"), data=dict(data),
        )


@dataclass
class Result:
    """What a call did. ``replayed``: it was already done; nothing was
    performed now, and ``receipt`` and ``raw`` are the recorded result."""

    effect: Effect
    replayed: bool = False
    receipt: str = ""
    raw: str | None = None


class OnceplanError(Exception):
    """Every error this package raises (but the body's own)."""


class APIError(OnceplanError):
    """An error answer of the API."""

    def __init__(self, status: int, code: str, message: str, field: str = "", stored_args_digest: str = "",
                 retry_after: float = 1.0) -> None:
        super().__init__(f"onceplan: {message} (HTTP {status} {code})")
        self.status, self.code, self.message, self.field = status, code, message, field
        self.stored_args_digest = stored_args_digest
        self.retry_after = retry_after


class NotPerformed(OnceplanError):
    """The body was not run (or its outcome is not known): ``effect`` is
    the server's answer, ``effect.next`` what happens next."""

    def __init__(self, message: str, effect: Effect) -> None:
        super().__init__(message)
        self.effect = effect


class InDoubt(NotPerformed):
    """Another call holds the key, or its outcome is unknown: do not
    perform it. A person may have to resolve it (``effect.url``)."""


class AwaitingApproval(NotPerformed):
    """A person must approve these args first, at ``effect.approval_url``;
    begin again after the approval."""


class ArgsMismatch(NotPerformed):
    """The key is bound to other args (a changed call under the same event
    id): give the changed call a new event id."""

    def __init__(self, api: APIError) -> None:
        super().__init__(str(api), Effect(key=""))
        self.api = api
        self.stored_args_digest = api.stored_args_digest


class Rejected(Exception):
    """Raise it from a body to say the outside system definitely did not
    perform the call (it refused it, or the request never left): the call
    is settled failed, which frees the key. Any other exception of the
    body is settled unknown — it may or may not have happened.

    ``raw`` is the outside system's answer, as received (recorded)."""

    def __init__(self, reason: str | BaseException, raw: str | bytes | None = None) -> None:
        super().__init__(str(reason))
        if isinstance(reason, BaseException):
            self.__cause__ = reason
        self.raw = raw


@dataclass
class Answer:
    """A body's result: the outside system's raw answer, as received, and
    its id for the effect (the receipt)."""

    raw: str | bytes | None = None
    receipt: str = ""


def _text(raw: str | bytes | None) -> str | None:
    if raw is None or isinstance(raw, str):
        return raw
    return bytes(raw).decode("utf-8", errors="replace")


# A body: called with the Call; returns an Answer, a (raw, receipt) tuple,
# the raw answer alone (str or bytes), or None.
BodyReturn = Union[Answer, tuple[Union[str, bytes, None], str], str, bytes, None]
F = TypeVar("F", bound=Callable[..., Any])


def _answer(v: Any) -> Answer:
    if v is None:
        return Answer()
    if isinstance(v, Answer):
        return v
    if isinstance(v, (str, bytes, bytearray)):
        return Answer(raw=bytes(v) if isinstance(v, bytearray) else v)
    if isinstance(v, tuple) and len(v) == 2:
        return Answer(raw=v[0], receipt=str(v[1] or ""))
    raise TypeError(f"a body returns an Answer, (raw, receipt), the raw answer or None, not {type(v).__name__}")


class Call:
    """The call in progress, given to the body: pass ``key`` to the outside
    system as its idempotency key (or operation id).

    The body runs in the caller's thread; Python cannot stop it from
    outside. When the lease is lost (a heartbeat refused, or its end
    reached without one), ``lost`` is set: a long body checks it
    (``check()`` raises InDoubt) and stops; ``remaining()`` is the time
    left to give the outside call as its timeout.
    """

    def __init__(self, client: Client, effect: Effect, lease: float, deadline: float) -> None:
        self.client = client
        self.effect = effect
        self.key = effect.key
        self.perform = True
        self.lost = threading.Event()
        self.lost_reason = ""
        self._lease = lease
        self._deadline = deadline
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._answer = Answer()
        self.result: Result | None = None

    def answer(self, raw: str | bytes | None, receipt: str = "") -> None:
        """Record the outside system's answer (a with-block's body calls
        it; it is settled when the block ends)."""
        self._answer = Answer(raw=raw, receipt=receipt)

    def remaining(self) -> float:
        """Seconds until the lease's local deadline (never past the
        server's)."""
        with self._lock:
            return max(0.0, self._deadline - time.monotonic())

    def check(self) -> None:
        """Raise InDoubt when the lease is lost: the body must stop."""
        if self.lost.is_set():
            raise InDoubt(f"onceplan: in doubt: {self.lost_reason}", self.effect)

    def _lose(self, reason: str) -> None:
        self.lost_reason = reason
        self.lost.set()

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._heartbeat, name=f"onceplan-heartbeat {self.key}", daemon=True)
        self._thread.start()

    def _halt(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _heartbeat(self) -> None:
        """Extends the lease every third of it while the body runs; sets
        ``lost`` when the lease is refused or its deadline passes without
        a successful heartbeat."""
        every = max(self._lease / 3, MIN_HEARTBEAT_EVERY)
        next_beat = time.monotonic() + every
        while True:
            with self._lock:
                deadline = self._deadline
            now = time.monotonic()
            if now >= deadline:
                self._lose("the lease ended without a heartbeat")
                return
            if self._stop.wait(max(0.0, min(next_beat, deadline) - now)):
                return
            if time.monotonic() < next_beat:
                continue  # woke for the deadline: the loop's check says so
            next_beat = time.monotonic() + every
            sent = time.monotonic()
            try:
                eff = self.client.heartbeat(self.key, self.effect.lease, self._lease, deadline=deadline)
            except APIError as e:
                if e.status == 409:
                    self._lose(f"the lease was lost: {e.message}")
                    return
                continue
            except (OSError, http.client.HTTPException, ValueError):
                continue
            granted = float(eff.lease_seconds) if eff.lease_seconds else self._lease
            with self._lock:
                self._deadline = sent + min(granted, self._lease)


class ToolCall:
    """One tool call's identity and args, not begun yet: ``client.effect``'s
    answer. Use it as a context manager (once) or as a decorator."""

    def __init__(self, client: Client, event: str, tool: str, target: TargetLike, args: Any = None, *,
                 amount_minor: int = 0, scope: str = "", recovery: str = "",
                 lease_seconds: int = DEFAULT_LEASE_SECONDS) -> None:
        if not isinstance(event, str) or not event.strip():
            raise ValueError("event is required: the run's or trigger's stable id for this step (the same on a retry)")
        if not isinstance(tool, str) or not tool.strip():
            raise ValueError("tool is required: the registered tool's name")
        if lease_seconds < 1:
            raise ValueError("lease_seconds must be at least 1")
        self.client, self.event, self.tool, self.target = client, event, tool, _target(target)
        self.args, self.amount_minor, self.scope, self.recovery = args, amount_minor, scope, recovery
        self.lease_seconds = int(lease_seconds)
        self._call: Call | None = None

    # The context manager: the block runs either way (Python cannot skip
    # it); its body performs the call only when ``call.perform``.
    def __enter__(self) -> Call:
        if self._call is not None:
            raise RuntimeError("a ToolCall's with-block runs once: call client.effect(...) again")
        call = self.client._open(self)
        self._call = call
        if call.perform and call.remaining() <= 0:
            # Never start a call after the lease: another caller may own it.
            call._halt()
            late = InDoubt("onceplan: in doubt: the lease ended before the body could start", call.effect)
            self.client._settle_body(call, late)
            raise late
        return call

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        call = self._call
        if call is None or not call.perform:
            return False
        call._halt()
        self.client._settle_body(call, exc)
        if exc is not None:
            _attach(exc, call.result)
        return False

    def __call__(self, fn: F) -> Callable[..., Result]:
        """As a decorator: ``fn(call, *args, **kwargs)`` is the body; calling
        the decorated function performs the call once (or replays it) and
        returns the Result."""

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Result:
            return self.client._do(self, lambda call: fn(call, *args, **kwargs))

        return run

    def run(self, body: Callable[[Call], BodyReturn]) -> Result:
        """Perform the call with body (once), as Go's Do: the Result, or
        one of the package's errors, or the body's."""
        return self.client._do(self, body)


class Client:
    """Calls one Onceplan server with one API token (an agent token is
    enough: agents may begin, heartbeat, settle and read)."""

    def __init__(self, url: str, token: str, *, timeout: float = 60.0) -> None:
        u = urllib.parse.urlparse(url or "")
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ValueError(f"url: {url!r} is not an http(s) URL like http://127.0.0.1:8080")
        if not token or not token.strip():
            raise ValueError("token: no API token (create one with `onceplan token create --agent`)")
        self.url = url.rstrip("/")
        self.token = token.strip()
        self.timeout = timeout

    def effect(self, event: str, tool: str, target: TargetLike, args: Any = None, *, amount_minor: int = 0,
               scope: str = "", recovery: str = "", lease_seconds: int = DEFAULT_LEASE_SECONDS) -> ToolCall:
        """The call event/tool/target with args, to perform once.

        ``event`` is the run's or trigger's stable occurrence id: the same
        on a retry or a restart of the same step (a run's or thread's id
        plus the step), new for a new decision — never an id a model mints
        again on each run. ``args`` are stored and hashed beside the key,
        never part of it.

        As a context manager::

            with client.effect("run-7/step-3", "crm.set_status", subject("c-17"), {"status": "gold"}) as call:
                if call.perform:
                    r = crm.post(..., headers={"Idempotency-Key": call.key})
                    call.answer(r.text, receipt=r.json()["id"])
            print(call.result.receipt)

        The block runs either way; it performs only when ``call.perform``
        (else ``call.result`` is the recorded result, replayed). A block
        that raises Rejected settles failed; any other exception unknown.
        """
        return ToolCall(self, event, tool, target, args, amount_minor=amount_minor, scope=scope,
                        recovery=recovery, lease_seconds=lease_seconds)

    # -- the protocol ---------------------------------------------------

    def _open(self, tc: ToolCall) -> Call:
        """Begin: a Call to perform (perform True, heartbeating), or one
        replaying (perform False, result set); raises the refusals."""
        eff, status, sent, received, date = self._begin(tc)
        if status == 200:
            call = Call(self, eff, 0, 0)
            call.perform = False
            call.result = Result(effect=eff, replayed=True, receipt=eff.receipt, raw=eff.raw)
            return call
        if status == 202:
            raise AwaitingApproval(f"onceplan: the call was not performed (awaiting approval, state {eff.state}): {eff.next}", eff)
        if status == 409:
            raise InDoubt(f"onceplan: the call was not performed (in doubt, state {eff.state}): {eff.next}", eff)
        # 201: the lease is ours from when the begin was sent (the server's
        # lease runs from its commit, later), so the local deadline is
        # never past the server's.
        lease = self._granted(tc, eff, sent, received, date)
        call = Call(self, eff, lease, sent + lease)
        call._start()
        return call

    @staticmethod
    def _granted(tc: ToolCall, eff: Effect, sent: float, received: float, date: str | None) -> float:
        """The lease the server granted, in seconds from the begin's send
        (its lease runs from its commit, later, so the local deadline is
        never past the server's): its lease_seconds when it says. A server
        that does not say grants what was asked unless its maximum is
        lower: lease_until confirms the asked lease (to a second), or
        reveals a shorter one, counted then from when the answer arrived.
        lease_until is read by our clock when it agrees with the answer's
        Date (to 2s), else by the Date (the server's clock, to the second
        below: a second less)."""
        asked = float(tc.lease_seconds)
        if eff.lease_seconds:
            return min(asked, float(eff.lease_seconds))
        if not eff.lease_until:
            return asked
        try:
            until = _rfc3339(eff.lease_until)
        except ValueError:
            return asked
        # The wall clock when the begin was sent and answered.
        wall = time.time() - time.monotonic()
        sent_at, received_at = wall + sent, wall + received
        if date:
            try:
                server_now = parsedate_to_datetime(date).timestamp()
                if abs(received_at - server_now) > 2.0:
                    # Our clock is off: the server's Date stands for both.
                    sent_at, received_at = server_now + 1.0, server_now + 1.0
            except (TypeError, ValueError):
                pass
        if until - sent_at >= asked - 1.0:
            return asked
        return max(0.0, min(asked, until - received_at))

    def _do(self, tc: ToolCall, body: Callable[[Call], BodyReturn]) -> Result:
        call = self._open(tc)
        if not call.perform:
            assert call.result is not None
            return call.result
        err: BaseException | None = None
        if call.remaining() <= 0:
            err = InDoubt("onceplan: in doubt: the lease ended before the body could start", call.effect)
        else:
            try:
                call._answer = _answer(body(call))
            except BaseException as e:  # settled unknown (or failed), then raised again
                err = e
        call._halt()
        self._settle_body(call, err)
        if err is not None:
            _attach(err, call.result)
            raise err
        assert call.result is not None
        return call.result

    def _settle_body(self, call: Call, err: BaseException | None) -> None:
        """Settle the body's verdict: done with its answer, failed for a
        Rejected, unknown for any other error; raises InDoubt when the
        settle says the call stayed unknown, and the settle's own error."""
        raw = _text(call._answer.raw)
        receipt = call._answer.receipt or ""
        reason = ""
        if err is None:
            outcome = "done"
            if not receipt.strip():
                receipt = "ok"
        elif isinstance(err, Rejected):
            outcome, reason = "failed", str(err) or "rejected"
            if err.raw is not None:
                raw = _text(err.raw)
        else:
            outcome, reason = "unknown", str(err) or type(err).__name__
        if raw is None and outcome != "unknown":
            raw = ""
        try:
            settled = self._settle_retrying(call.effect, outcome, receipt, reason, raw)
        except BaseException as e:
            call.result = Result(effect=call.effect, receipt=receipt, raw=raw)
            if err is not None:
                raise e from err
            raise
        # The settle's answer, with what the begin said of this attempt.
        settled.takeover, settled.lease = call.effect.takeover, call.effect.lease
        call.result = Result(effect=settled, receipt=receipt, raw=raw)
        if settled.state == "unknown" and outcome != "unknown":
            # The lease ended before the settle and recovery left the call
            # for a person, who has this answer beside it.
            doubt = InDoubt("onceplan: in doubt: the lease ended before the settle, so the call stays unknown until a "
                            f"person resolves it (the answer is recorded for them): {settled.next}", settled)
            if err is not None:
                raise doubt from err
            raise doubt

    def _settle_retrying(self, eff: Effect, outcome: str, receipt: str, reason: str, raw: str | None) -> Effect:
        """Settle, again after a transport error (a settle that committed
        answers the same when repeated)."""
        for attempt in range(SETTLE_TRIES):
            try:
                return self.settle(eff.key, eff.lease, outcome, receipt=receipt, reason=reason, raw=raw)
            except APIError:
                raise
            except (OSError, http.client.HTTPException):
                if attempt == SETTLE_TRIES - 1:
                    raise
                time.sleep((attempt + 1) * 0.2)
        raise AssertionError("unreachable")

    # -- the routes -----------------------------------------------------

    def _begin(self, tc: ToolCall) -> tuple[Effect, int, float, float, str | None]:
        body: dict[str, Any] = {"event": tc.event, "tool": tc.tool, "target": tc.target.to_json(),
                                "args": {} if tc.args is None else tc.args, "lease_seconds": tc.lease_seconds}
        if tc.amount_minor:
            body["amount_minor"] = tc.amount_minor
        if tc.scope:
            body["scope"] = tc.scope
        if tc.recovery:
            body["recovery"] = tc.recovery
        try:
            status, data, sent, received, headers = self._request("POST", "/effects", body, ok=(200, 201, 202, 409))
        except APIError as e:
            if e.status == 422:
                raise ArgsMismatch(e) from None
            raise
        return Effect.from_json(data), status, sent, received, headers.get("Date")

    def begin(self, event: str, tool: str, target: TargetLike, args: Any = None, **kw: Any) -> tuple[Effect, int]:
        """Commit the intent and answer the server's status: 201 (this
        caller holds ``effect.lease`` and may perform it), 200 done, 202
        awaiting approval, 409 in doubt. 422 raises ArgsMismatch."""
        eff, status, *_ = self._begin(ToolCall(self, event, tool, target, args, **kw))
        return eff, status

    def settle(self, key: str, lease: str, outcome: str, *, receipt: str = "", reason: str = "",
               raw: str | bytes | None = None) -> Effect:
        """Report the call's outcome (done, failed or unknown) with the
        outside system's raw answer (None sends none: only with unknown)."""
        body: dict[str, Any] = {"lease": lease, "outcome": outcome}
        if receipt:
            body["receipt"] = receipt
        if reason:
            body["reason"] = reason
        if raw is not None:
            body["raw"] = _text(raw)
        _, data, *_ = self._request("POST", f"/effects/{_path(key)}/settle", body)
        return Effect.from_json(data)

    def heartbeat(self, key: str, lease: str, lease_seconds: float, *, deadline: float | None = None) -> Effect:
        """Extend the lease to lease_seconds from now; never waits (out a
        429) past deadline (time.monotonic())."""
        _, data, *_ = self._request("POST", f"/effects/{_path(key)}/heartbeat",
                                    {"lease": lease, "lease_seconds": max(1, int(lease_seconds))}, deadline=deadline)
        return Effect.from_json(data)

    def get(self, key: str, *, wait: float | None = None) -> Effect:
        """The call's state now; with wait, the server may hold the answer
        up to that many seconds until the state changes (a server without
        the long-poll answers at once)."""
        path = f"/effects/{_path(key)}"
        if wait:
            path += "?" + urllib.parse.urlencode({"wait": f"{max(1, int(wait))}s"})
        _, data, *_ = self._request("GET", path, None, timeout=self.timeout + (wait or 0))
        return Effect.from_json(data)

    def wait(self, key: str, timeout: float, *, until: Callable[[Effect], bool] | None = None) -> Effect:
        """Read the call until ``until`` holds (default: it is no longer
        pending) or timeout seconds pass (then the last answer); long-polls
        when the server can, else asks again after its retry_after."""
        done = until or (lambda e: e.state != "pending")
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            asked = time.monotonic()
            eff = self.get(key, wait=min(30.0, max(1.0, left)))
            if done(eff) or time.monotonic() >= end:
                return eff
            # A server without the long-poll answered at once: wait here.
            pause = max(1.0, float(eff.retry_after)) - (time.monotonic() - asked)
            if pause > 0:
                time.sleep(min(pause, max(0.0, end - time.monotonic())))

    def resolve(self, key: str, outcome: str, reason: str, *, receipt: str | None = None,
                raw: str | bytes | None = None) -> dict[str, Any]:
        """A person's verdict on an unknown call (delivered or
        not_delivered; an operator's token, never an agent's): the server's
        answer (the call's status, with next, where the server gives it)."""
        body: dict[str, Any] = {"outcome": outcome, "reason": reason}
        if receipt is not None:
            body["receipt"] = receipt
        if raw is not None:
            body["raw"] = _text(raw)
        _, data, *_ = self._request("POST", f"/effects/{_path(key)}/resolve", body)
        return data

    # -- HTTP -----------------------------------------------------------

    def _request(self, method: str, path: str, body: Any, *, ok: tuple[int, ...] = (200,),
                 deadline: float | None = None, timeout: float | None = None
                 ) -> tuple[int, dict[str, Any], float, float, Mapping[str, str]]:
        """One request (sent again after a 429's Retry-After, a few times):
        its status, JSON answer, when it was sent and answered
        (time.monotonic()) and headers; an answer outside ok raises
        APIError."""
        payload = None if body is None else json.dumps(body).encode()
        for attempt in range(1, MAX_RATE_LIMITED + 1):
            sent = time.monotonic()
            t = timeout or self.timeout
            if deadline is not None:
                t = max(0.05, min(t, deadline - sent))
            try:
                status, data, headers = self._once(method, path, payload, ok, t)
                return status, data, sent, time.monotonic(), headers
            except APIError as e:
                if e.status != 429 or attempt == MAX_RATE_LIMITED:
                    raise
                if deadline is not None and time.monotonic() + e.retry_after >= deadline:
                    raise
                time.sleep(e.retry_after)
        raise AssertionError("unreachable")

    def _once(self, method: str, path: str, payload: bytes | None, ok: tuple[int, ...], timeout: float
              ) -> tuple[int, dict[str, Any], Mapping[str, str]]:
        req = urllib.request.Request(self.url + "/api/v1" + path, data=payload, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Accept", "application/json")
        if payload is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with _opener.open(req, timeout=timeout) as res:
                status, raw, headers = res.status, res.read(16 << 20), res.headers
        except urllib.error.HTTPError as e:
            status, raw, headers = e.code, e.read(16 << 20), e.headers
        except urllib.error.URLError as e:
            if isinstance(e.reason, OSError):
                raise e.reason from e
            raise OSError(str(e.reason)) from e
        if status in ok:
            try:
                data = json.loads(raw)
            except ValueError as e:
                raise ValueError(f"onceplan answered HTTP {status} with a body that is not its JSON: {e}") from e
            if not isinstance(data, dict):
                raise ValueError(f"onceplan answered HTTP {status} with JSON that is not an object")
            return status, data, headers
        wait = 1.0
        try:
            secs = int(headers.get("Retry-After", ""))
            if 0 < secs <= 60:
                wait = float(secs)
        except ValueError:
            pass
        code, message, fld, stored = "http", raw.decode("utf-8", errors="replace").strip(), "", ""
        try:
            err = json.loads(raw)
            e = err.get("error") if isinstance(err, dict) else None
            if isinstance(e, dict) and e.get("message"):
                code, message, fld = str(e.get("code", "")), str(e["message"]), str(e.get("field", ""))
                stored = str(err.get("stored_args_digest", ""))
        except ValueError:
            pass
        raise APIError(status, code, message, fld, stored, wait)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The API never redirects; a redirect (a proxy's sign-in page) is an
    error, not a request sent again elsewhere."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect())


def _rfc3339(s: str) -> float:
    """An RFC 3339 time (Go's, with up to 9 fraction digits, which
    Python 3.10's fromisoformat refuses beyond 6) as a timestamp."""
    s = re.sub(r"(\.\d{6})\d+", r"\1", s.strip()).replace("Z", "+00:00").replace("z", "+00:00")
    return datetime.fromisoformat(s).timestamp()


def _attach(err: BaseException, result: Result | None) -> None:
    """The settled result, on the body's error raised again: its
    ``onceplan_result`` (Go's Do returns both)."""
    try:
        setattr(err, "onceplan_result", result)
    except AttributeError:
        pass


def _path(key: str) -> str:
    """key as one path segment, escaped as Go's url.PathEscape does (the
    server reads the segment unescaped: a key's ":" stays as it is)."""
    return urllib.parse.quote(key, safe="$&+,:;=@")

"""Onceplan for agent runtimes: each tool call performed exactly once
through a running Onceplan's single-effects API (POST /api/v1/effects and
its settle, heartbeat and status routes). Standard library only.

    from onceplan import Client, subject

    client = Client("http://127.0.0.1:8080", token)
    with client.effect("run-7/step-3", "crm.set_status", subject("c-17"), {"status": "gold"}) as call:
        if call.perform:
            call.answer(crm_set_status("c-17", "gold", idempotency_key=call.key))
"""

from .client import (
    APIError,
    Answer,
    ArgsMismatch,
    AwaitingApproval,
    Call,
    Client,
    Effect,
    InDoubt,
    NotPerformed,
    OnceplanError,
    Rejected,
    Result,
    Target,
    ToolCall,
    email,
    subject,
)
from .tools import langgraph_event, wrap_tool

__all__ = [
    "APIError",
    "Answer",
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
    "langgraph_event",
    "subject",
    "wrap_tool",
]

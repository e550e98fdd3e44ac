"""Tool calls of an agent graph (LangGraph, LangChain, DeerFlow) performed
exactly once.

``wrap_tool(client, fn, target_from=...)`` answers a function that a
LangGraph ToolNode (or anything) calls the way it calls a tool — with the
model's arguments as keywords and the run's ``config`` — and that performs
``fn`` through Onceplan: once per event, replaying the recorded result on a
re-run.

The event is what makes a re-run the same call: by default the graph's
thread id and the step its checkpoint records (``langgraph_event``), both
unchanged when a crashed run resumes. Never the ``tool_call_id``: a model
that runs again mints a new one, and the call would be performed twice.
"""

from __future__ import annotations

import functools
import inspect
import json
from typing import Any, Callable, Mapping

from .client import Client, Rejected, TargetLike

__all__ = ["langgraph_event", "wrap_tool"]


def langgraph_event(config: Mapping[str, Any] | None, args: Mapping[str, Any]) -> str:
    """The event of a tool call in a LangGraph run:
    ``langgraph/<thread id>/<nodes>/step-<n>`` (the TypeScript client's
    langGraphEvent names it the same), read from the config LangGraph passes (its
    ``configurable.thread_id`` and ``metadata.langgraph_step``, which a
    resumed run keeps). Raises ValueError, naming what is missing, when the
    config has no thread or step: then say which run this is with
    ``event_from``."""
    config = config or {}
    configurable = config.get("configurable") or {}
    metadata = config.get("metadata") or {}
    thread = configurable.get("thread_id") or metadata.get("thread_id")
    if not thread:
        raise ValueError("config: no configurable.thread_id: run the graph with a checkpointer and a thread_id "
                         "(or pass wrap_tool an event_from that names the run and its step)")
    step = metadata.get("langgraph_step")
    if step is None:
        raise ValueError("config: no metadata.langgraph_step: call the tool from a LangGraph node "
                         "(or pass wrap_tool an event_from that names the run and its step)")
    ns = metadata.get("langgraph_checkpoint_ns") or configurable.get("checkpoint_ns") or metadata.get("langgraph_node") or ""
    # A checkpoint namespace ends with the task's id (node:<uuid>), new on
    # each attempt: keep only the nodes' names.
    nodes = "|".join(part.split(":", 1)[0] for part in str(ns).split("|") if part)
    return f"langgraph/{thread}/{nodes}/step-{step}" if nodes else f"langgraph/{thread}/step-{step}"


def _config_annotation() -> Any:
    """LangChain injects the run's config into a tool's parameter annotated
    RunnableConfig; without LangChain, a mapping."""
    try:
        from langchain_core.runnables import RunnableConfig  # type: ignore[import-not-found]
    except ImportError:
        return Mapping[str, Any]
    return RunnableConfig


def wrap_tool(
    client: Client,
    fn: Callable[..., Any],
    *,
    target_from: Callable[[Mapping[str, Any]], TargetLike],
    tool: str | None = None,
    event_from: Callable[[Mapping[str, Any] | None, Mapping[str, Any]], str] = langgraph_event,
    key_param: str | None = "idempotency_key",
    receipt_from: Callable[[Any], str] | None = None,
    recovery: str = "",
    lease_seconds: int = 60,
) -> Callable[..., Any]:
    """``fn`` as a tool performed once per event.

    The answer takes fn's keyword arguments (the model's) and a ``config``
    (the run's, which LangGraph passes to a tool's parameter of type
    RunnableConfig; the answer declares one). It begins the call
    ``event_from(config, args)`` / ``tool`` (default fn's name) /
    ``target_from(args)`` with the args; runs fn only when it holds the
    lease, passing the key as ``key_param`` when fn takes it (the outside
    system's idempotency key); records fn's return value as JSON (the raw
    answer; ``receipt_from(value)`` its receipt) and returns it; and on a
    re-run returns the recorded value without calling fn.

    fn raising Rejected settles failed (nothing happened; a later run may
    perform it); any other exception settles unknown. The refusals
    (AwaitingApproval, InDoubt, ArgsMismatch) are raised with ``next``,
    the sentence saying what happens next, in their message: a ToolNode
    that handles tool errors shows it to the model.
    """
    name = tool or getattr(fn, "__name__", "")
    if not name:
        raise ValueError("tool: the callable has no __name__: name the registered tool")
    sig = inspect.signature(fn)
    takes_key = key_param is not None and (
        key_param in sig.parameters or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()))

    @functools.wraps(fn)
    def run(*, config: Mapping[str, Any] | None = None, **args: Any) -> Any:
        event = event_from(config, args)
        call = client.effect(event, name, target_from(args), args, recovery=recovery, lease_seconds=lease_seconds)

        def body(c: Any) -> tuple[str, str]:
            kwargs = dict(args)
            if takes_key and key_param is not None:
                kwargs[key_param] = c.key
            try:
                value = fn(**kwargs)
            except Rejected:
                raise
            raw = json.dumps(value, default=str)
            return raw, receipt_from(value) if receipt_from else ""

        result = call.run(body)
        if result.raw is None or result.raw == "":
            return None
        try:
            return json.loads(result.raw)
        except ValueError:
            return result.raw  # recorded by another client: as received

    # The signature a tool framework reads: fn's own, less the key, plus
    # the run's config.
    params = [p for n, p in sig.parameters.items() if n != key_param and p.kind is not p.VAR_KEYWORD]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.kind is p.POSITIONAL_OR_KEYWORD else p
              for p in params if p.kind is not p.VAR_POSITIONAL and p.kind is not p.POSITIONAL_ONLY]
    params.append(inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None,
                                    annotation=_config_annotation()))
    run.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    ann = dict(getattr(fn, "__annotations__", {}))
    ann.pop(key_param or "", None)
    ann["config"] = _config_annotation()
    run.__annotations__ = ann
    return run

"""A stand-in model API for the real agent CLIs, on 127.0.0.1 (standard library only).

A test scripts a conversation as a list of Steps; each model request the agent makes takes the
next one, answered in the wire format of the path it came to (Anthropic Messages SSE for Claude
Code, OpenAI Responses SSE for Codex, Gemini streamGenerateContent SSE for Gemini CLI, OpenAI chat
completions, streamed or not, for opencode and aider). Every answered request is recorded in
`served`, with the
usage the server reported, so a test can check the agent's figures exactly.

Another wire format is one more WIRES entry: a function that writes a Step as that API's response
(e.g. Gemini `:streamGenerateContent`, OpenAI `/chat/completions`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Tokens:
    """Usage the server reports for one reply, in the Anthropic sense (input excludes cached)."""

    input: int = 0
    cached: int = 0
    cache_write: int = 0
    output: int = 0
    thinking: int = 0  # Gemini's thoughtsTokenCount (billed as output, reported apart)


@dataclass(frozen=True)
class Step:
    """One model reply: some text, then at most one tool call; or an HTTP error."""

    text: str = ""
    tool: str | None = None  # the tool's name as the agent declared it
    tool_input: dict | str | None = None  # arguments (a str is sent as-is: custom/freeform tools)
    tokens: Tokens = Tokens()
    status: int = 200  # anything else answers with `error` as the body, no SSE
    error: dict | None = None
    headers: dict = field(default_factory=dict)
    hold: threading.Event | None = None  # the reply waits for this (a call still in flight)


# A scripted reply may depend on the request (e.g. a path inside the agent's working directory).
Script = Step | Callable[[dict], Step]

_CWD = re.compile(r"Primary working directory: (\S+?)(?:\\n|\s)|<cwd>([^<]+)</cwd>")


def working_directory(request: dict) -> str:
    """The directory the agent says it runs in (Claude's system prompt, Codex's environment context)."""
    match = _CWD.search(json.dumps(request))
    if match is None:
        raise AssertionError("the request names no working directory")
    return match.group(1) or match.group(2)


@dataclass
class Served:
    path: str
    request: dict
    step: Step


class ModelServer:
    def __init__(self, steps: list[Script] | None = None) -> None:
        self.steps: list[Script] = list(steps or [])
        self.served: list[Served] = []
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request, for debugging
        self.started = threading.Event()  # set when the first model request arrives
        self.holding = threading.Event()  # set when a reply starts waiting for its `hold`
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> ModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        for step in [*self.steps, *(s.step for s in self.served)]:
            if isinstance(step, Step) and step.hold is not None:
                step.hold.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def next_id(self) -> int:
        return next(self._ids)

    def take(self, path: str, request: dict) -> Step:
        with self._lock:
            step = self.steps.pop(0) if self.steps else Step(text="(the scripted conversation is over)")
            if callable(step):
                step = step(request)
            self.served.append(Served(path, request, step))
        self.started.set()
        return step

    def billed(self) -> list[Tokens]:
        """Tokens of every reply that was sent in full."""
        return [s.step.tokens for s in self.served if s.step.status == 200]


# -- wire formats -------------------------------------------------------------------------------


def _sse(write: Callable[[bytes], None], event: str | None, data: dict) -> None:
    head = f"event: {event}\n" if event else ""
    write(f"{head}data: {json.dumps(data)}\n\n".encode())


def anthropic_messages(server: ModelServer, request: dict, step: Step, write) -> None:
    """POST /v1/messages with stream: true (what Claude Code sends)."""
    n = server.next_id()
    t = step.tokens
    usage = {
        "input_tokens": t.input,
        "cache_read_input_tokens": t.cached,
        "cache_creation_input_tokens": t.cache_write,
    }
    _sse(
        write,
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": f"msg_{n:04d}",
                "type": "message",
                "role": "assistant",
                "model": request.get("model", "claude"),
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {**usage, "output_tokens": 1},
            },
        },
    )
    index = 0
    if step.text:
        _sse(
            write,
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
        )
        _sse(
            write,
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": step.text},
            },
        )
        _sse(write, "content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    if step.tool:
        _sse(
            write,
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "tool_use", "id": f"toolu_{n:04d}", "name": step.tool, "input": {}},
            },
        )
        _sse(
            write,
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(step.tool_input or {})},
            },
        )
        _sse(write, "content_block_stop", {"type": "content_block_stop", "index": index})
    if step.hold is not None:
        server.holding.set()
        step.hold.wait()
    _sse(
        write,
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use" if step.tool else "end_turn", "stop_sequence": None},
            "usage": {**usage, "output_tokens": t.output},
        },
    )
    _sse(write, "message_stop", {"type": "message_stop"})


def openai_responses(server: ModelServer, request: dict, step: Step, write) -> None:
    """POST /v1/responses with stream: true (Codex with wire_api = "responses")."""
    n = server.next_id()
    t = step.tokens
    response = {
        "id": f"resp_{n:04d}",
        "object": "response",
        "status": "in_progress",
        "model": request.get("model", "gpt"),
        "output": [],
    }
    _sse(write, "response.created", {"type": "response.created", "response": response})
    items = []
    if step.text:
        items.append(
            {
                "type": "message",
                "id": f"msg_{n:04d}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": step.text, "annotations": []}],
            }
        )
    if step.tool:
        call = {"id": f"fc_{n:04d}", "call_id": f"call_{n:04d}", "name": step.tool, "status": "completed"}
        if isinstance(step.tool_input, str):
            items.append({"type": "custom_tool_call", **call, "input": step.tool_input})
        else:
            items.append({"type": "function_call", **call, "arguments": json.dumps(step.tool_input or {})})
    for index, item in enumerate(items):
        _sse(
            write,
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": index, "item": item},
        )
    if step.hold is not None:
        server.holding.set()
        step.hold.wait()
    # Responses counts cached tokens inside input_tokens.
    usage = {
        "input_tokens": t.input + t.cached,
        "input_tokens_details": {"cached_tokens": t.cached},
        "output_tokens": t.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": t.input + t.cached + t.output,
    }
    _sse(
        write,
        "response.completed",
        {
            "type": "response.completed",
            "response": {**response, "status": "completed", "output": items, "usage": usage},
        },
    )


def gemini_stream(server: ModelServer, request: dict, step: Step, write) -> None:
    """POST /v1beta/models/<model>:streamGenerateContent?alt=sse (Gemini CLI with
    GOOGLE_GEMINI_BASE_URL); the model answering is the one in the path."""
    t = step.tokens
    parts: list[dict] = [{"text": step.text}] if step.text else []
    if step.tool:
        parts.append({"functionCall": {"name": step.tool, "args": step.tool_input or {}}})
    model = server.served[-1].path.rsplit("/", 1)[-1].split(":", 1)[0]
    if step.hold is not None:
        server.holding.set()
        step.hold.wait()
    # Gemini counts cached tokens inside the prompt, and thinking tokens only in the total.
    usage = {
        "promptTokenCount": t.input + t.cached,
        "candidatesTokenCount": t.output,
        "totalTokenCount": t.input + t.cached + t.output + t.thinking,
    }
    if t.cached:
        usage["cachedContentTokenCount"] = t.cached
    if t.thinking:
        usage["thoughtsTokenCount"] = t.thinking
    _sse(
        write,
        None,
        {
            "candidates": [
                {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": usage,
            "modelVersion": model,
            "responseId": f"resp_{server.next_id():04d}",
        },
    )


def _chat_message(server: ModelServer, step: Step) -> tuple[dict, str]:
    message: dict = {"role": "assistant", "content": step.text or None}
    if step.tool:
        arguments = step.tool_input if isinstance(step.tool_input, str) else json.dumps(step.tool_input or {})
        message["tool_calls"] = [
            {
                "id": f"call_{server.next_id():04d}",
                "type": "function",
                "function": {"name": step.tool, "arguments": arguments},
            }
        ]
    return message, "tool_calls" if step.tool else "stop"


def _chat_usage(t: Tokens) -> dict:
    # Chat completions count cached tokens inside prompt_tokens.
    return {
        "prompt_tokens": t.input + t.cached,
        "completion_tokens": t.output,
        "total_tokens": t.input + t.cached + t.output,
        "prompt_tokens_details": {"cached_tokens": t.cached},
    }


def openai_chat(server: ModelServer, request: dict, step: Step, write) -> None:
    """POST /v1/chat/completions with stream: true (opencode's @ai-sdk/openai-compatible)."""
    message, finish = _chat_message(server, step)
    head = {
        "id": f"chatcmpl-{server.next_id():04d}",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": request.get("model", "gpt"),
    }
    delta: dict = {"role": "assistant"}
    if step.text:
        delta["content"] = step.text
    if step.tool:
        delta["tool_calls"] = [{"index": 0, **message["tool_calls"][0]}]
    _sse(write, None, {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    if step.hold is not None:
        server.holding.set()
        step.hold.wait()
    _sse(write, None, {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    _sse(write, None, {**head, "choices": [], "usage": _chat_usage(step.tokens)})
    write(b"data: [DONE]\n\n")


def openai_chat_whole(server: ModelServer, request: dict, step: Step) -> dict:
    """POST /v1/chat/completions without streaming (aider with --no-stream, through litellm)."""
    message, finish = _chat_message(server, step)
    return {
        "id": f"chatcmpl-{server.next_id():04d}",
        "object": "chat.completion",
        "created": 1,
        "model": request.get("model", "gpt"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": _chat_usage(step.tokens),
    }


WIRES: dict[str, Callable] = {
    "/v1/messages": anthropic_messages,
    "/v1/responses": openai_responses,
    ":streamGenerateContent": gemini_stream,
    "/chat/completions": openai_chat,
}
# Wires that also answer without streaming, when the request does not ask for a stream.
WHOLE: dict[str, Callable] = {
    "/chat/completions": openai_chat_whole,
}


def unscripted(request: dict) -> Step | None:
    """Requests answered outside the script: opencode names each session with a title request
    (its usage is counted nowhere by opencode, so it costs nothing here)."""
    messages = request.get("messages") if isinstance(request.get("messages"), list) else []
    first = messages[0] if messages and isinstance(messages[0], dict) else {}
    if "You are a title generator" in str(first.get("content")):
        return Step(text="Fix add()")
    return None


def _handler(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet: the test output is for assertions
            pass

        def _plain(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, str(value))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_HEAD(self) -> None:
            server.requests.append(("HEAD", self.path))
            self._plain(200)

        def do_GET(self) -> None:
            server.requests.append(("GET", self.path))
            path = self.path.split("?", 1)[0]
            if path.endswith("/models"):
                self._plain(200, json.dumps({"data": [], "models": []}).encode())
            else:
                self._plain(404, b'{"error": {"message": "not found"}}')

        def do_POST(self) -> None:
            server.requests.append(("POST", self.path))
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                request = json.loads(raw or b"{}")
            except ValueError:
                request = {}
            wire = next((w for suffix, w in WIRES.items() if path.endswith(suffix)), None)
            if wire is None:
                self._plain(404, b'{"error": {"message": "not found"}}')
                return
            step = unscripted(request)
            if step is None:
                step = server.take(path, request)
            if step.status != 200:
                self._plain(step.status, json.dumps(step.error or {}).encode(), step.headers)
                return
            whole = next((w for suffix, w in WHOLE.items() if path.endswith(suffix)), None)
            if whole is not None and not request.get("stream"):
                if step.hold is not None:
                    server.holding.set()
                    step.hold.wait()
                self._plain(200, json.dumps(whole(server, request, step)).encode(), step.headers)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            for name, value in step.headers.items():
                self.send_header(name, str(value))
            self.end_headers()
            self.close_connection = True

            def write(chunk: bytes) -> None:
                self.wfile.write(chunk)
                self.wfile.flush()

            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the agent went away mid-reply
                wire(server, request, step, write)

    return Handler

"""A fake OpenAI-compatible HTTP server on loopback, for tests and benchmarks (stdlib only).

The real `openai` client talks to it over real HTTP, so retries, status codes, headers, timeouts
and connection errors behave as they would against a provider.

Quick start::

    from testkit.fake_openai import FakeOpenAI, Reply

    with FakeOpenAI() as fake:                      # or: async with FakeOpenAI() as fake
        client = openai.AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0)
        fake.script_chat(Reply.rate_limited(retry_after_s=0.2), Reply.json({"memories": []}))
        ...
        assert fake.counters["chat"] == 2
        bodies = fake.chat_requests()              # the JSON bodies received, in order

Endpoints: `POST /v1/chat/completions`, `POST /v1/embeddings`, `GET /v1/models` (the `/v1`
prefix is optional). `base_url` is `http://127.0.0.1:PORT/v1`.

Chat answers, in this order of precedence:
1. `json_schema_supported = False`: any request with `response_format.type == "json_schema"` gets
   the 400 a provider without structured output sends (not consuming the script).
2. The scripted queue (`script_chat(*replies)`), first in first out, one reply per request.
3. The default responder: `set_chat_responder(fn)` with `fn(request_body) -> content str`;
   `set_extraction(obj)` answers `json.dumps(obj)` to everything; out of the box
   `rules_responder`, which runs the project's rule patterns over the user lines of the prompt's
   transcript and answers contract JSON (`{"memories": [...]}`) — deterministic and meaningful.

Embeddings: scripted queue (`script_embeddings`) first, else deterministic hashing vectors
(`extraction.embeddings.hashing_vector`) of the request's `dimensions`, or `embedding_dim`.
Both `encoding_format` float and base64 are served.

Replies (`Reply.*`): `text(content)`, `json(obj)`, `malformed(text)`, `refused(text)`,
`truncated(text)` (finish_reason "length"), `error(status, message, headers=)`,
`rate_limited(retry_after_s=, retry_after_ms=)`, `server_error(status=500)`,
`reject_json_schema()`, `hang_up()` (closes the socket without answering), `raw(status, body)`,
`embedding(vectors)`. Any reply takes `delay_s=` (use it with a short client timeout for a timeout).

Latency: `chat_latency_s` / `embedding_latency_s` (constructor or attributes) are added to every
request. It is a `ThreadingHTTPServer` (one thread per connection, listen backlog 512), so 64+
concurrent 300 ms requests overlap and the server is not the bottleneck.

Bookkeeping: `requests` (every `RecordedRequest`: path, body, headers, status, timing),
`chat_requests()`, `embedding_requests()`, `counters` ("chat", "embeddings", "faults",
"json_schema_rejected", "max_in_flight", …), `reset()`. `require_api_key="k"` answers 401 to
any other bearer key.

Pytest: the `fake_openai` fixture in `tests/fakes/fixtures.py` yields a started server; import it
in a conftest (`from tests.fakes.fixtures import fake_openai  # noqa: F401`).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import json
import random
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from extraction.embeddings import hashing_vector
from extraction.prompt import count_tokens

__all__ = [
    "ChatResponder",
    "FakeOpenAI",
    "RecordedRequest",
    "Reply",
    "persona_learning_responder",
    "rules_responder",
]

ChatResponder = Callable[[dict[str, Any]], str]


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply:
    """One scripted answer. Build with the class methods; `delay_s` delays any of them."""

    status: int = 200
    content: str | None = None  # chat: the assistant message content
    refusal: str | None = None
    finish_reason: str = "stop"
    vectors: tuple[tuple[float, ...], ...] | None = None  # embeddings: explicit vectors
    headers: tuple[tuple[str, str], ...] = ()
    error_message: str | None = None
    error_type: str = "invalid_request_error"
    raw_body: bytes | None = None
    raw_content_type: str = "application/json"
    disconnect: bool = False
    only_for_json_schema: bool = False  # reject_json_schema: applies to json_schema requests only
    delay_s: float = 0.0

    @classmethod
    def text(cls, content: str, *, delay_s: float = 0.0) -> Reply:
        """A normal 200 answer with this message content."""
        return cls(content=content, delay_s=delay_s)

    @classmethod
    def json(cls, obj: object, *, delay_s: float = 0.0) -> Reply:
        """A 200 answer whose content is `json.dumps(obj)`."""
        return cls(content=json.dumps(obj), delay_s=delay_s)

    @classmethod
    def malformed(cls, text: str = '{"memories": [{"key": "oops"', *, delay_s: float = 0.0) -> Reply:
        """A 200 answer whose content is not valid contract JSON."""
        return cls(content=text, delay_s=delay_s)

    @classmethod
    def refused(cls, text: str = "I can't help with that.") -> Reply:
        """A 200 answer with `message.refusal` set and no content."""
        return cls(content=None, refusal=text)

    @classmethod
    def truncated(cls, text: str = '{"memories": [') -> Reply:
        """A 200 answer cut off at the token limit (finish_reason "length")."""
        return cls(content=text, finish_reason="length")

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "fake error",
        *,
        headers: dict[str, str] | None = None,
        error_type: str = "invalid_request_error",
        delay_s: float = 0.0,
    ) -> Reply:
        """An OpenAI-style error body `{"error": {...}}` with this status and headers."""
        return cls(
            status=status,
            error_message=message,
            error_type=error_type,
            headers=tuple((headers or {}).items()),
            delay_s=delay_s,
        )

    @classmethod
    def rate_limited(
        cls, *, retry_after_s: float | None = None, retry_after_ms: float | None = None
    ) -> Reply:
        """429 with `Retry-After` (seconds) and/or `retry-after-ms`."""
        headers: dict[str, str] = {}
        if retry_after_s is not None:
            headers["Retry-After"] = f"{retry_after_s:g}"
        if retry_after_ms is not None:
            headers["retry-after-ms"] = f"{retry_after_ms:g}"
        return cls.error(429, "Rate limit reached (fake)", headers=headers, error_type="rate_limit_error")

    @classmethod
    def server_error(cls, status: int = 500, message: str = "The server had an error (fake)") -> Reply:
        """A 5xx error."""
        return cls.error(status, message, error_type="server_error")

    @classmethod
    def reject_json_schema(cls) -> Reply:
        """The 400 a provider without structured output sends to a json_schema request."""
        return replace(_JSON_SCHEMA_REJECTION, only_for_json_schema=True)

    @classmethod
    def hang_up(cls, *, delay_s: float = 0.0) -> Reply:
        """Close the connection without answering (the client sees a connection error)."""
        return cls(disconnect=True, delay_s=delay_s)

    @classmethod
    def raw(cls, status: int, body: bytes, *, content_type: str = "application/json") -> Reply:
        """Exactly this status and body (e.g. a non-JSON 200 body)."""
        return cls(status=status, raw_body=body, raw_content_type=content_type)

    @classmethod
    def embedding(cls, vectors: Sequence[Sequence[float]], *, delay_s: float = 0.0) -> Reply:
        """An embeddings answer with exactly these vectors (e.g. of a wrong dimension)."""
        return cls(vectors=tuple(tuple(v) for v in vectors), delay_s=delay_s)


_JSON_SCHEMA_REJECTION = Reply(
    status=400,
    error_message=(
        "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."
    ),
    error_type="invalid_request_error",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedRequest:
    """One request the server received and what it answered."""

    method: str
    path: str
    body: dict[str, Any] | None
    headers: dict[str, str]
    status: int
    received_at: float
    duration_s: float
    scripted: bool


_NUMBERED_LINE = re.compile(r"^\[(\d+)\] (\w+)(?: \(continued\))?: (.*)$")


def _transcript_user_messages(body: dict[str, Any]) -> list[tuple[int, str]]:
    """(number, text) of the transcript's user messages in the request's user messages (the
    prompt's format: `[n] role: …`, further lines of a message indented)."""
    found: dict[int, list[str]] = {}
    current: int | None = None
    for message in body.get("messages", []):
        if message.get("role") != "user" or not isinstance(message.get("content"), str):
            continue
        for line in message["content"].splitlines():
            match = _NUMBERED_LINE.match(line)
            if match is not None:
                current = int(match.group(1)) if match.group(2) == "user" else None
                if current is not None:
                    found.setdefault(current, []).append(match.group(3))
            elif current is not None and line.startswith(" "):
                found[current].append(line.strip())
            else:
                current = None
    return [(number, "\n".join(parts)) for number, parts in found.items()]


def _allowed_scopes(body: dict[str, Any]) -> list[str]:
    response_format = body.get("response_format") or {}
    try:
        enum = response_format["json_schema"]["schema"]["properties"]["memories"]["items"]["properties"][
            "scope"
        ]["enum"]
        return [str(s) for s in enum]
    except (KeyError, TypeError):
        pass
    system = " ".join(str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system")
    return ["user", "persona_user"] if '"persona_user"' in system else ["user"]


def rules_responder(body: dict[str, Any]) -> str:
    """Default chat answer: contract JSON from the project's rule patterns over the user lines."""
    from extraction.rules import extract_statements

    scopes = _allowed_scopes(body)
    scope = "persona_user" if "persona_user" in scopes else "user"
    items = [
        item
        for number, text in _transcript_user_messages(body)
        for item in extract_statements(text, scope, number)  # type: ignore[arg-type]
    ]
    return json.dumps({"memories": items})


def persona_learning_responder(body: dict[str, Any]) -> str:
    """`rules_responder`, but where the persona scope is allowed (persona learning on) the last
    fact goes to the persona: what a persona that learns from its users writes."""
    reply = json.loads(rules_responder(body))
    if "persona" in _allowed_scopes(body) and reply["memories"]:
        reply["memories"][-1]["scope"] = "persona"
    return json.dumps(reply)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 512
    allow_reuse_address = True

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)


def _ignore_status(status: int) -> None:
    pass


def _nothing() -> None:
    pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real providers; every answer sets Content-Length
    # TCP_NODELAY, as real providers' servers: the headers and the body leave in two writes, and
    # with Nagle's algorithm the body waited for the client's delayed ACK: 40 ms on every answer
    disable_nagle_algorithm = True
    server: _Server
    timeout = 60  # an idle keep-alive connection's thread exits after this
    on_respond: Callable[[int], None] = staticmethod(_ignore_status)
    mark_scripted: Callable[[], None] = staticmethod(_nothing)

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # silence the default stderr log
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        self.server.fake._handle(self)

    def _send_json(self, status: int, payload: object, headers: Iterable[tuple[str, str]] = ()) -> None:
        self._send_bytes(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_bytes(
        self, status: int, body: bytes, content_type: str, headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        self.on_respond(status)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _drop(self) -> None:
        self.on_respond(0)
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


@dataclass(kw_only=True)
class _State:
    chat_script: collections.deque[Reply] = field(default_factory=collections.deque)
    embedding_script: collections.deque[Reply] = field(default_factory=collections.deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    counters: collections.Counter[str] = field(default_factory=collections.Counter)
    in_flight: int = 0


class FakeOpenAI:
    """The fake server (see the module docstring). Thread-safe; start/stop or use as a context manager."""

    def __init__(
        self,
        *,
        chat_latency_s: float = 0.0,
        chat_latency_jitter: float = 0.0,
        embedding_latency_s: float = 0.0,
        embedding_dim: int = 384,
        json_schema_supported: bool = True,
        require_api_key: str | None = None,
        chat_responder: ChatResponder | None = None,
        model: str = "fake-model",
    ) -> None:
        """Configure; nothing listens until `start()`."""
        self.chat_latency_s = chat_latency_s
        # each chat latency drawn uniformly from chat_latency_s * (1 ± jitter): the same mean, the
        # spread of a real provider's (seeded, so a run repeats)
        self.chat_latency_jitter = chat_latency_jitter
        self._jitter = random.Random(0)
        self.embedding_latency_s = embedding_latency_s
        self.embedding_dim = embedding_dim
        self.json_schema_supported = json_schema_supported
        self.require_api_key = require_api_key
        self.model = model
        self._responder: ChatResponder = chat_responder or rules_responder
        self._lock = threading.Lock()
        self._state = _State()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> str:
        """Listen on 127.0.0.1 (a free port) in a background thread; returns `base_url`."""
        if self._server is not None:
            return self.base_url
        self._stopping.clear()
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        """Stop listening, wake delayed replies, and close open connections."""
        server = self._server
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        with server.connections_lock:
            connections = list(server.connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    @property
    def port(self) -> int:
        """The listening port (after `start()`)."""
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not started; call start() or use it as a context manager")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1`, what `openai.AsyncOpenAI(base_url=...)` wants."""
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> FakeOpenAI:
        self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        import asyncio

        await asyncio.to_thread(self.stop)

    # -- scripting ------------------------------------------------------------------------------

    def script_chat(self, *replies: Reply) -> None:
        """Queue replies for the next chat requests (FIFO; then the default responder answers)."""
        with self._lock:
            self._state.chat_script.extend(replies)

    def script_embeddings(self, *replies: Reply) -> None:
        """Queue replies for the next embeddings requests (FIFO; then hashing vectors)."""
        with self._lock:
            self._state.embedding_script.extend(replies)

    def set_chat_responder(self, responder: ChatResponder) -> None:
        """Default chat answer: `responder(request_body) -> content`."""
        self._responder = responder

    def set_extraction(self, obj: object) -> None:
        """Default chat answer: always `json.dumps(obj)`."""
        content = json.dumps(obj)
        self._responder = lambda _body: content

    def pending_script(self) -> tuple[int, int]:
        """(chat, embeddings) scripted replies not consumed yet."""
        with self._lock:
            return len(self._state.chat_script), len(self._state.embedding_script)

    def reset(self) -> None:
        """Forget scripts, the request log and counters (the responder and latencies stay)."""
        with self._lock:
            in_flight = self._state.in_flight
            self._state = _State(in_flight=in_flight)

    # -- inspection -----------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request so far, in arrival order of completion."""
        with self._lock:
            return list(self._state.requests)

    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of the chat-completions requests, in order."""
        return [r.body or {} for r in self.requests if r.path.endswith("/chat/completions")]

    def embedding_requests(self) -> list[dict[str, Any]]:
        """Bodies of the embeddings requests, in order."""
        return [r.body or {} for r in self.requests if r.path.endswith("/embeddings")]

    @property
    def counters(self) -> dict[str, int]:
        """Counts: chat, embeddings, faults, json_schema_rejected, max_in_flight, prompt_tokens …"""
        with self._lock:
            return dict(self._state.counters)

    # -- request handling (server threads) ------------------------------------------------------

    def _handle(self, handler: _Handler) -> None:
        started = time.monotonic()
        with self._lock:
            self._state.in_flight += 1
            peak = self._state.counters["max_in_flight"]
            self._state.counters["max_in_flight"] = max(peak, self._state.in_flight)
        body: dict[str, Any] | None = None
        recorded = False
        scripted = False

        def record(status: int) -> None:
            # Called just BEFORE the answer is written, so a client that has its answer always
            # finds its request in the log.
            nonlocal recorded
            if recorded:
                return
            recorded = True
            with self._lock:
                self._state.in_flight -= 1
                self._state.requests.append(
                    RecordedRequest(
                        method="POST",
                        path=handler.path,
                        body=body,
                        headers={k.lower(): v for k, v in handler.headers.items()},
                        status=status,
                        received_at=started,
                        duration_s=time.monotonic() - started,
                        scripted=scripted,
                    )
                )

        def mark_scripted() -> None:
            nonlocal scripted
            scripted = True

        handler.on_respond = record
        handler.mark_scripted = mark_scripted
        try:
            length = int(handler.headers.get("Content-Length") or 0)
            raw = handler.rfile.read(length) if length else b""
            try:
                parsed = json.loads(raw) if raw else None
                body = parsed if isinstance(parsed, dict) else None
            except json.JSONDecodeError:
                body = None
            self._answer(handler, body)
        finally:
            record(500)

    def _answer(self, handler: _Handler, body: dict[str, Any] | None) -> None:
        path = handler.path.split("?", 1)[0].rstrip("/")
        endpoint = (
            "chat"
            if path.endswith("/chat/completions")
            else "embeddings"
            if path.endswith("/embeddings")
            else ""
        )
        if endpoint:
            self._count(endpoint)  # every request to the endpoint, answered or refused
        wanted = self.require_api_key
        if wanted is not None and handler.headers.get("Authorization") != f"Bearer {wanted}":
            self._count("faults")
            self._send_reply(handler, Reply.error(401, "Incorrect API key provided (fake)"))
            return
        if body is None:
            self._send_reply(handler, Reply.error(400, "request body is not a JSON object"))
            return
        if endpoint == "chat":
            self._answer_chat(handler, body)
        elif endpoint == "embeddings":
            self._answer_embeddings(handler, body)
        else:
            self._send_reply(handler, Reply.error(404, f"no route {handler.path}"))

    def _count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._state.counters[name] += amount

    def _answer_chat(self, handler: _Handler, body: dict[str, Any]) -> None:
        uses_schema = (body.get("response_format") or {}).get("type") == "json_schema"
        if uses_schema:
            self._count("chat_json_schema")
        if uses_schema and not self.json_schema_supported:
            self._count("json_schema_rejected")
            self._send_reply(handler, _JSON_SCHEMA_REJECTION)
            return
        reply: Reply | None = None
        with self._lock:
            if self._state.chat_script:
                head = self._state.chat_script[0]
                if not head.only_for_json_schema or uses_schema:
                    reply = self._state.chat_script.popleft()
        if reply is not None and reply.only_for_json_schema:
            self._count("json_schema_rejected")
        if not self._sleep(self._chat_latency() + (reply.delay_s if reply else 0.0)):
            handler._drop()
            return
        if reply is None:
            reply = Reply(content=self._responder(body))
        else:
            handler.mark_scripted()
        if reply.disconnect or reply.raw_body is not None or reply.error_message is not None:
            self._count("faults")
            self._send_reply(handler, reply)
            return
        prompt_tokens = self._prompt_tokens(body)
        completion_tokens = count_tokens(reply.content or "")
        self._count("prompt_tokens", prompt_tokens)
        self._count("completion_tokens", completion_tokens)
        payload = {
            "id": f"chatcmpl-fake-{self.counters.get('chat', 0)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content, "refusal": reply.refusal},
                    "finish_reason": reply.finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        handler._send_json(reply.status, payload, reply.headers)

    @staticmethod
    def _prompt_tokens(body: dict[str, Any]) -> int:
        # OpenAI's accounting: content tokens + ~4 per message + 3 for the reply primer.
        messages = body.get("messages") or []
        return sum(count_tokens(str(m.get("content") or "")) + 4 for m in messages) + 3

    def _answer_embeddings(self, handler: _Handler, body: dict[str, Any]) -> None:
        with self._lock:
            reply = self._state.embedding_script.popleft() if self._state.embedding_script else None
        if reply is not None:
            handler.mark_scripted()
        if not self._sleep(self.embedding_latency_s + (reply.delay_s if reply else 0.0)):
            handler._drop()
            return
        if reply is not None and (
            reply.disconnect or reply.raw_body is not None or reply.error_message is not None
        ):
            self._count("faults")
            self._send_reply(handler, reply)
            return
        raw_input = body.get("input")
        texts = [raw_input] if isinstance(raw_input, str) else [str(t) for t in (raw_input or [])]
        if not texts or any(t == "" for t in texts):
            # the real API refuses empty input; mirror it so callers learn to avoid it
            self._send_reply(handler, Reply.error(400, "'$.input' is invalid: empty string"))
            return
        dim = int(body.get("dimensions") or self.embedding_dim)
        if reply is not None and reply.vectors is not None:
            vectors = [list(v) for v in reply.vectors]
        else:
            vectors = [hashing_vector(text, dim) for text in texts]
        as_base64 = body.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": index,
                "embedding": (
                    base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
                    if as_base64
                    else vector
                ),
            }
            for index, vector in enumerate(vectors)
        ]
        tokens = sum(count_tokens(t) for t in texts)
        payload = {
            "object": "list",
            "data": data,
            "model": body.get("model") or self.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        handler._send_json(200, payload)

    def _send_reply(self, handler: _Handler, reply: Reply) -> None:
        if reply.disconnect:
            handler._drop()
            return
        if reply.raw_body is not None:
            handler._send_bytes(reply.status, reply.raw_body, reply.raw_content_type, reply.headers)
            return
        error = {"message": reply.error_message, "type": reply.error_type, "param": None, "code": None}
        handler._send_json(reply.status, {"error": error}, reply.headers)

    def _chat_latency(self) -> float:
        if not self.chat_latency_jitter:
            return self.chat_latency_s
        with self._lock:
            spread = self._jitter.uniform(-self.chat_latency_jitter, self.chat_latency_jitter)
        return self.chat_latency_s * (1 + spread)

    def _sleep(self, seconds: float) -> bool:
        """Wait (latency, delays); False when the server stopped meanwhile: then answer nothing."""
        if seconds > 0:
            return not self._stopping.wait(seconds)
        return not self._stopping.is_set()

"""A loopback OpenAI-compatible streaming server for `make conformance` (no GPU, no model).

Timing as in ../shared/real_traces/CLIENT_RUNS.md: TTFT = 20 ms + 0.05 ms per prompt token, then
one SSE chunk per output token every 10 ms, and a final usage chunk when the request sets
``stream_options.include_usage``. Tokens are whitespace words (prompt) and ``max_tokens`` (or
``max_completion_tokens``) outputs of one word each. No batching model: every request is served
on its own thread. Endpoints: /health, /v1/models, /v1/chat/completions, /v1/completions.

    python bench/mock_openai_server.py --port 8765 --model mock-llm-8b
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FIRST_S, PER_PROMPT_TOKEN_S, PER_OUTPUT_TOKEN_S = 0.020, 0.00005, 0.010


def _prompt_tokens(body: dict) -> int:
    if "messages" in body:
        text = " ".join(
            m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
            for m in body["messages"]
            if isinstance(m, dict)
        )
    else:
        prompt = body.get("prompt", "")
        text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
    return max(1, len(text.split()))


class Handler(BaseHTTPRequestHandler):
    model = "mock-llm-8b"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet: clients log enough
        return

    def _json(self, code: int, obj: object) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.startswith("/health"):
            self._json(200, {"status": "ok"})
        elif self.path.startswith("/v1/models"):
            self._json(200, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": "body is not JSON"})
            return
        chat = self.path.startswith("/v1/chat/completions")
        if not chat and not self.path.startswith("/v1/completions"):
            self._json(404, {"error": "not found"})
            return
        n_in = _prompt_tokens(body)
        n_out = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        rid = f"cmpl-{uuid.uuid4().hex[:12]}"
        start = time.perf_counter()
        if not body.get("stream"):
            time.sleep(FIRST_S + PER_PROMPT_TOKEN_S * n_in + PER_OUTPUT_TOKEN_S * (n_out - 1))
            text = " ".join(["tok"] * n_out)
            choice = {"index": 0, "finish_reason": "length"}
            choice |= (
                {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            )
            usage = {"prompt_tokens": n_in, "completion_tokens": n_out,
                     "total_tokens": n_in + n_out}  # fmt: skip
            self._json(200, {"id": rid, "object": "chat.completion" if chat else "text_completion",
                             "model": self.model, "choices": [choice], "usage": usage})  # fmt: skip
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        obj = "chat.completion.chunk" if chat else "text_completion"
        for i in range(n_out):
            due = start + FIRST_S + PER_PROMPT_TOKEN_S * n_in + PER_OUTPUT_TOKEN_S * i
            time.sleep(max(0.0, due - time.perf_counter()))
            delta = {"content": "tok "} if chat else None
            choice = {"index": 0, "finish_reason": "length" if i == n_out - 1 else None}
            choice |= {"delta": delta} if chat else {"text": "tok "}
            self._event({"id": rid, "object": obj, "model": self.model, "choices": [choice]})
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": n_in, "completion_tokens": n_out,
                     "total_tokens": n_in + n_out}  # fmt: skip
            self._event({"id": rid, "object": obj, "model": self.model, "choices": [],
                         "usage": usage})  # fmt: skip
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _event(self, obj: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


def serve(port: int, model: str) -> ThreadingHTTPServer:
    """Start the server on 127.0.0.1:port in a daemon thread; returns it (call shutdown())."""
    Handler.model = model
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--model", default="mock-llm-8b")
    a = ap.parse_args()
    srv = serve(a.port, a.model)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.shutdown()

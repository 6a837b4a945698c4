"""A pytest fixture: a chat-completions server on loopback for rag-answer's `--llm openai` (registered by conftest),
and `Stream`, a reply it sends as server-sent events."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest


@dataclass
class Stream:
    """A streamed reply: server-sent events, one piece every `pause` seconds, then [DONE]; with `held`, the
    reply stalls after its pieces until the test sets that event (a stall with no clock in it: the client's
    timeout, whatever the machine's load, is what ends the wait)."""

    pieces: list[str]
    pause: float = 0.0
    held: threading.Event | None = None


def send_chat_reply(handler: BaseHTTPRequestHandler, text: str) -> None:
    """Answer a chat-completions request with `text` as the assistant's whole message (200, JSON)."""
    data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@pytest.fixture
def llm_server():
    """A chat-completions server on 127.0.0.1 replying with queued texts (or raw bytes)."""

    class Replies(list):
        """Queued replies; `.seen` holds each request as (path, Authorization header, JSON body)."""

        seen: list

    replies = Replies()
    replies.seen = seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, self.headers.get("Authorization"), body))
            reply = replies.pop(0)
            if isinstance(reply, Stream):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for piece in reply.pieces:
                    time.sleep(reply.pause)
                    chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                if reply.held is not None:  # a client that never gives up gets [DONE] at last, and its test fails, not hangs
                    reply.held.wait(120)
                self.wfile.write(b"data: [DONE]\n\n")
                return
            if isinstance(reply, tuple):
                code, raw = reply
                self.send_response(code)
                self.end_headers()
                self.wfile.write(raw)
                return
            send_chat_reply(self, reply)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    # polled every 50 ms, not serve_forever's 500: shutdown() waits for the next poll, at each test's teardown
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1", replies
    server.shutdown()
    server.server_close()

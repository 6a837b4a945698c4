"""openai_chat: the answer written by any server speaking the OpenAI chat completions protocol (`--reader openai`).

llama.cpp's server, vLLM's, a hosted one: configured by RAG_LLM_URL, RAG_LLM_MODEL, RAG_LLM_KEY,
RAG_LLM_TIMEOUT and RAG_LLM_MAX_TOKENS (`build`). The prompt is `ragline.answer.prompt`'s.
"""

from __future__ import annotations

import json
import os
from typing import Any

import ragline.records
from ragline.answer.context import ContextBlock
from ragline.answer.prompt import MAX_TOKENS, STOP, frame, limits, messages
from ragline.answer.reader import Setup
from ragline.records import StageError


class OpenAIChat:
    """Any server speaking the OpenAI chat completions protocol, over HTTP (stdlib only).

    `url` is the API base (e.g. http://127.0.0.1:8080/v1; /chat/completions is
    appended unless already there, a trailing slash dropped: a server would answer
    `.../completions/` with a redirect that a POST does not follow), `key` an optional
    bearer key. The request bounds the answer (`max_tokens`, the STOP sequences) and
    streams it, so `timeout` is the longest wait for the next piece of the reply (the
    first token included), not for the whole of it: a slow local model writing steadily
    is not cut off, a stalled one is. A server that does not stream (a plain JSON
    reply) is read too. The command reads RAG_LLM_URL, RAG_LLM_MODEL, RAG_LLM_KEY,
    RAG_LLM_TIMEOUT and RAG_LLM_MAX_TOKENS (`build`). A timeout, a refused
    connection, an HTTP error or a malformed reply is a StageError (exit 1), never a
    hang and never a silent refusal.
    """

    name = "openai"
    features: tuple[str, ...] = ()
    written = True

    def __init__(self, url: str, model: str = "default", key: str | None = None, timeout: float = 60.0, max_tokens: int = MAX_TOKENS):
        base = url.rstrip("/")
        self.url = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self.model = model
        self.key = key
        self.timeout = timeout
        self.max_tokens = max_tokens

    def record(self) -> dict[str, Any]:
        return {"reader": self.name, "model": self.model}

    def usage(self) -> tuple[int, int] | None:
        """None: the server's tokens are its own to count."""
        return None

    def prompt(self, question: str, blocks: list[ContextBlock]) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in messages(question, blocks)]

    def frame(self, question: str) -> tuple[str, ...]:
        return frame(question)

    def body(self, question: str, blocks: list[ContextBlock]) -> dict[str, Any]:
        """The request: temperature 0, the output bounded, streamed."""
        return {
            "model": self.model,
            "messages": self.prompt(question, blocks),
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "stop": list(STOP),
            "stream": True,
        }

    def generate(self, question: str, blocks: list[ContextBlock]) -> str:
        import urllib.error  # only here: a question answered without an LLM server does not pay for http.client and ssl
        import urllib.request

        headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(self.url, data=json.dumps(self.body(question, blocks)).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                if response.headers.get_content_type() == "text/event-stream":
                    return self._streamed(response)
                raw = response.read()
        except urllib.error.HTTPError as err:
            raise StageError(f"LLM server answered HTTP {err.code} {err.reason} ({self.url})") from None
        except urllib.error.URLError as err:
            if isinstance(err.reason, TimeoutError):
                raise self._timed_out() from None
            raise StageError(f"LLM server unreachable: {err.reason} ({self.url})") from None
        except TimeoutError:
            raise self._timed_out() from None
        return self._content(raw)

    def _timed_out(self) -> StageError:
        return StageError(
            f"LLM server did not answer within {self.timeout:g} s ({self.url}): "
            "for a slow model raise RAG_LLM_TIMEOUT (seconds to wait for each piece of the reply)"
        )

    def _content(self, raw: bytes) -> str:
        """The text of a whole (not streamed) chat completion."""
        try:
            content = json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise StageError(
                f"LLM reply is not a chat completion: {ragline.records.one_line(raw.decode('utf-8', 'replace'), 120)}"
            ) from None
        if not isinstance(content, str):
            raise StageError("LLM reply has no text content")
        return content

    def _streamed(self, response: Any) -> str:
        """The text of a streamed chat completion: server-sent events `data: {chunk}` up to `data: [DONE]`,
        each chunk's `choices[0].delta.content` in order. Each read waits `timeout` seconds at most."""
        parts: list[str] = []
        for line in response:
            if not line.startswith(b"data:"):
                continue  # blank separators, comments, event names
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            try:
                chunk = json.loads(data)
                if "error" in chunk:
                    raise StageError(f"LLM server error: {ragline.records.one_line(json.dumps(chunk['error']), 120)}")
                piece = (chunk["choices"][0].get("delta") or {}).get("content") if chunk["choices"] else None
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                raise StageError(
                    f"LLM reply is not a chat completion stream: {ragline.records.one_line(data.decode('utf-8', 'replace'), 120)}"
                ) from None
            if isinstance(piece, str):
                parts.append(piece)
        return "".join(parts)

    def fallback(self) -> str | None:
        return None

    def missing_evidence(self, question: str, blocks: list[ContextBlock]) -> str | None:
        """None: the model judges for itself whether the blocks answer (it replies REFUSAL when not)."""
        return None


def build(setup: Setup) -> OpenAIChat:
    """The OpenAI-protocol reader configured by RAG_LLM_URL, RAG_LLM_MODEL, RAG_LLM_KEY, RAG_LLM_TIMEOUT, RAG_LLM_MAX_TOKENS."""
    url = os.environ.get("RAG_LLM_URL")
    if not url:
        raise StageError("--reader openai needs RAG_LLM_URL (the API base, e.g. http://127.0.0.1:8080/v1)")
    timeout = ragline.records.env_default("RAG_LLM_TIMEOUT", 60.0, float)
    max_tokens = limits()
    return OpenAIChat(url, os.environ.get("RAG_LLM_MODEL") or "default", os.environ.get("RAG_LLM_KEY") or None, timeout, max_tokens)

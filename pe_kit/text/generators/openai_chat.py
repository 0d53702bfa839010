"""Any OpenAI-compatible ``/chat/completions`` endpoint (vLLM, Ollama, llama.cpp server…), stdlib only: the route
to the paper's generator class (Qwen3-235B, §3) when one is served."""
from __future__ import annotations

import concurrent.futures
import http.client
import ipaddress
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Mapping, Sequence


from pe_kit.text.generators.base import (GenerationError, SeededGenerator, SeedEcho, _chat_messages,
                                         _check_int, _check_prompts, _check_seeds, clean_reply)


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OpenAIChatGenerator(SeededGenerator):
    """One ``POST {base_url}/chat/completions`` per prompt (``request_body``), ``concurrency`` at a time; the reply is
    ``choices[0].message.content`` (through ``clean_reply`` unless ``clean=False``). Timeouts, connection errors,
    HTTP 429 and 5xx are retried ``max_retries`` times with back-off; loopback URLs bypass any proxy. Raises
    ValueError for bad settings; ``GenerationError`` naming the URL, the cause and the prompts done (``completed``).
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 60.0,
                 max_retries: int = 2, retry_backoff_s: float = 0.5, temperature: float = 0.9, top_p: float = 0.95,
                 max_tokens: int = 128, system_prompt: str | None = None, concurrency: int = 1, batch_size: int = 8,
                 clean: bool = True, extra_body: Mapping[str, Any] | None = None):
        if not isinstance(base_url, str) or not base_url.strip():
            raise ValueError(f"base_url must be a non-empty URL such as 'http://localhost:8000/v1', got {base_url!r}")
        parsed = urllib.parse.urlparse(base_url.strip())
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"base_url must start with http:// or https:// and name a host, got {base_url!r}")
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be the served model name (non-empty str), got {model!r}")
        if not isinstance(timeout, (int, float)) or float(timeout) <= 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        for field, value, low in (("max_retries", max_retries, 0), ("max_tokens", max_tokens, 1),
                                  ("concurrency", concurrency, 1), ("batch_size", batch_size, 1)):
            _check_int(value, field, low)
        if not isinstance(retry_backoff_s, (int, float)) or float(retry_backoff_s) < 0:
            raise ValueError(f"retry_backoff_s must be >= 0, got {retry_backoff_s!r}")
        if not isinstance(temperature, (int, float)) or float(temperature) < 0:
            raise ValueError(f"temperature must be a float >= 0, got {temperature!r}")
        if not isinstance(top_p, (int, float)) or not 0.0 < float(top_p) <= 1.0:
            raise ValueError(f"top_p must be a float in (0, 1], got {top_p!r}")
        self.base_url = base_url.strip().rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.retry_backoff_s = float(retry_backoff_s)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_tokens = int(max_tokens)
        self.system_prompt = system_prompt
        self.concurrency = int(concurrency)
        self.batch_size = int(batch_size)
        self.clean = bool(clean)
        self.extra_body = dict(extra_body or {})
        self.name = f"openai:{model}@{self.base_url}"
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(parsed.hostname) else []
        self._opener = urllib.request.build_opener(*handlers)
        self._echo = SeedEcho()  # a server that drops `seed` is named (SeedIgnoredWarning), not trusted silently

    def config(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                "system_prompt": self.system_prompt, "clean": self.clean, "extra_body": self.extra_body}

    def request_body(self, prompt: str, seed: int) -> dict:
        """The JSON body sent for one ``prompt`` (str) with ``seed`` (int)."""
        body = {"model": self.model, "messages": _chat_messages(self.system_prompt, prompt),
                "temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens, "seed": int(seed),
                "n": 1}
        body.update(self.extra_body)
        return body

    def _post_once(self, data: bytes) -> tuple[bool, str]:
        """One HTTP attempt: (True, reply text), or (False, error message) for an error worth retrying; raises
        ``GenerationError`` for one that retrying cannot fix."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            try:
                detail = exc.read()[:300].decode("utf-8", "replace")
            except Exception:  # noqa: BLE001
                detail = ""
            msg = f"HTTP {exc.code} {exc.reason} from {self.url}" + (f": {detail.strip()}" if detail.strip() else "")
            if exc.code == 429 or exc.code >= 500:
                return False, msg
            raise GenerationError(f"{self.name}: {msg}") from None
        except (TimeoutError, urllib.error.URLError) as exc:  # a URLError's reason may be the timeout
            if isinstance(getattr(exc, "reason", exc), TimeoutError):
                return False, f"request to {self.url} timed out after {self.timeout:g} s"
            return False, f"could not reach {self.url}: {exc.reason}"
        except OSError as exc:
            return False, f"connection to {self.url} failed: {exc}"
        except http.client.HTTPException as exc:  # truncated body, bad status line
            return False, f"bad HTTP response from {self.url}: {type(exc).__name__}: {exc}"
        try:
            payload = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise GenerationError(
                f"{self.name}: malformed reply from {self.url}: not JSON (starts {raw[:80]!r})") from None
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise GenerationError(
                f"{self.name}: malformed reply from {self.url}: expected choices[0].message.content, got "
                f"{json.dumps(payload)[:200]}"
            ) from None
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise GenerationError(f"{self.name}: malformed reply from {self.url}: choices[0].message.content is "
                                  f"{type(content).__name__}, not str")
        return True, content

    def complete(self, prompt: str, seed: int) -> str:
        """Send one chat request and return the (cleaned) reply text. Raises :class:`GenerationError`."""
        data = json.dumps(self.request_body(prompt, seed)).encode("utf-8")
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.retry_backoff_s * 2 ** (attempt - 1))
            ok, text = self._post_once(data)
            if ok:
                return clean_reply(text) if self.clean else text.strip()
            last = text
        tries = self.max_retries + 1
        raise GenerationError(f"{self.name}: {last} ({tries} attempt{'s' if tries > 1 else ''})")

    def generate_seeded(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[str]:
        """One request per prompt and seed, ``concurrency`` in flight; ``GenerationError`` (with ``completed``) on
        failure, ``SeedIgnoredWarning`` when a prompt's replies under three or more seeds are one text."""
        items = _check_prompts(prompts)
        seed_list = _check_seeds(seeds, len(items))
        results: dict[int, str] = {}
        error: GenerationError | None = None
        stop = threading.Event()

        def task(prompt: str, seed: int) -> str | None:
            if stop.is_set():
                return None  # an earlier request failed: do not send more
            try:
                return self.complete(prompt, seed)
            except GenerationError:
                stop.set()
                raise

        with concurrent.futures.ThreadPoolExecutor(self.concurrency) as pool:
            futures = {pool.submit(task, p, s): i for i, (p, s) in enumerate(zip(items, seed_list))}
            for fut in concurrent.futures.as_completed(futures):
                if fut.cancelled():
                    continue
                try:
                    text = fut.result()  # requests already in flight still count
                except GenerationError as exc:
                    if error is None:
                        error = exc
                        for other in futures:
                            other.cancel()
                    continue
                if text is not None:
                    results[futures[fut]] = text
        if error is not None:
            raise GenerationError(
                f"{error} -- {len(results)} of {len(items)} prompts had succeeded", completed=results
            ) from error
        out = [results[i] for i in range(len(items))]
        if self.temperature > 0:
            self._echo.check(self.name, items, seed_list, out, self.temperature)
        return out

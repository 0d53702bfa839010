"""Variation generators for multi-round PE (Alg. A.1 lines 21–25: J = Top_k̃(Y), R = {s_j : j ∈ J},
F = BuildFeedback(S, Y), V = G(F; g), S' = R ∪ V). ``Feedback`` holds only public bank texts ordered by the DP
histogram, so no private record reaches a generator (post-processing of Y).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from pe_kit.cache import content_hash
from pe_kit.text.generators.base import SEED_IGNORED, GenerationError, _check_prompts, normalize_text, samples
from pe_kit.text.generators.prompts import icl_prompt

__all__ = ["Feedback", "build_feedback", "make_variations", "PublicRetrievalGenerator", "public_pool",
           "variation_generator", "VARIATION_KINDS"]

VARIATION_KINDS = ("public-retrieval", "smollm2", "openai", "wordnet")


@dataclass(frozen=True)
class Feedback:
    """F^(t) = BuildFeedback(S^(t), Y^(t)) (Alg. A.1 line 23): ``positives`` (retained non-probe candidates,
    highest Y first), ``negatives`` (lowest Y first) and ``seen`` (every bank's texts: no variation may be one)."""

    positives: tuple[str, ...]
    negatives: tuple[str, ...] = ()
    seen: frozenset = field(default_factory=frozenset)


def build_feedback(bank_texts: Sequence[str], histogram: np.ndarray, probe_positions: np.ndarray | None,
                   retain: int, n_negatives: int = 0, seen: Iterable[str] = ()) -> tuple[np.ndarray, Feedback]:
    """Top-k̃ retention and ICL feedback from one released histogram (Alg. A.1 lines 21–23).

    Probes are never candidates; ties in Y go to the lowest bank index. ``retain``: k̃ ∈ [1, p − r]; ``seen``:
    texts of earlier banks. Returns (retained int64 (k̃,) bank indices, highest Y first; ``Feedback``). Raises
    ValueError on a length mismatch, non-finite Y, or k̃ out of range.
    """
    y = np.asarray(histogram, dtype=np.float64).ravel()
    p = len(bank_texts)
    if y.shape != (p,):
        raise ValueError(f"histogram has shape {y.shape} but the bank has {p} texts: pass the bank's own release")
    if not np.isfinite(y).all():
        raise ValueError("histogram contains NaN or inf: release it with a finite noise multiplier")
    probes = np.zeros(p, dtype=bool)
    if probe_positions is not None and len(probe_positions):
        probes[np.asarray(probe_positions, dtype=np.int64)] = True
    cand = np.flatnonzero(~probes)
    if not 1 <= int(retain) <= cand.size:
        raise ValueError(f"retain={retain} must lie in [1, {cand.size}] (the non-probe candidates); lower "
                         "retain_fraction")
    if n_negatives < 0:
        raise ValueError(f"n_negatives={n_negatives} must be ≥ 0")
    order = cand[np.lexsort((cand, -y[cand]))]  # Y descending, ties → lowest index
    retained = order[: int(retain)].astype(np.int64)
    rest = order[int(retain):][::-1]  # lowest Y first (ties: highest index first among the lowest)
    neg = rest[: int(n_negatives)]
    fb = Feedback(positives=tuple(bank_texts[i] for i in retained), negatives=tuple(bank_texts[i] for i in neg),
                  seen=frozenset(seen) | frozenset(bank_texts))
    return retained, fb


def _prompts(generator, feedback: Feedback, n: int, rng: np.random.Generator, icl_examples: int,
             icl_negatives: int, genre: str, offset: int) -> list[str]:
    pos = list(feedback.positives)
    if getattr(generator, "raw_text_input", False):
        return [pos[(offset + i) % len(pos)] for i in range(n)]
    neg = list(feedback.negatives)
    out = []
    for _ in range(n):
        ex = [pos[j] for j in rng.choice(len(pos), size=min(icl_examples, len(pos)), replace=False)]
        ng = ([neg[j] for j in rng.choice(len(neg), size=min(icl_negatives, len(neg)), replace=False)]
              if neg and icl_negatives > 0 else [])
        out.append(icl_prompt(ex, ng, genre=genre))
    return out


def make_variations(generator, feedback: Feedback, n: int, rng: np.random.Generator, *, icl_examples: int = 3,
                    icl_negatives: int = 2, genre: str = "blog post", max_attempts: int = 5) -> list[str]:
    """V^(t) = G(F^(t); g): ``n`` new distinct texts, none already in any bank (Alg. A.1 line 24).

    Raw-text generators get the positives round-robin, others ICL prompts (``icl_examples`` positives,
    ``icl_negatives`` negatives); up to ``max_attempts`` calls. Raises ValueError on bad arguments or no
    positives; GenerationError when ``n`` texts are not obtained.
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator; pass np.random.default_rng(seed)")
    if n < 0 or max_attempts < 1 or icl_examples < 1 or icl_negatives < 0:
        raise ValueError(f"need n ≥ 0, max_attempts ≥ 1, icl_examples ≥ 1, icl_negatives ≥ 0; got n={n}, "
                         f"max_attempts={max_attempts}, icl_examples={icl_examples}, icl_negatives={icl_negatives}")
    if n and not feedback.positives:
        raise ValueError("feedback.positives is empty: retain at least one candidate (retain ≥ 1)")
    seen_norm = {normalize_text(t) for t in feedback.seen}
    out: list[str] = []
    offset = 0
    by_prompt: dict[str, set[str]] = {}  # texts each prompt gave so far (each call draws new seeds)
    echoes = dropped = 0
    for _ in range(int(max_attempts)):
        need = n - len(out)
        if need <= 0:
            break
        prompts = _prompts(generator, feedback, need, rng, icl_examples, icl_negatives, genre, offset)
        offset += need
        extra = {"exclude": feedback.seen | frozenset(out)} if getattr(generator, "accepts_exclude", False) else {}
        texts = generator.generate(prompts, rng, **extra)
        if len(texts) != len(prompts):
            raise GenerationError(f"{generator.name} returned {len(texts)} texts for {len(prompts)} prompts")
        for prompt, t in zip(prompts, texts):
            t = " ".join(str(t).split())
            key = normalize_text(t)
            earlier = by_prompt.setdefault(prompt, set())
            if t and key not in seen_norm:
                seen_norm.add(key)
                out.append(t)
            else:
                dropped += 1
                echoes += key in earlier
            earlier.add(key)
    if len(out) < n and echoes and 2 * echoes >= dropped:
        common = (f"{generator.name}: only {len(out)} of {n} new distinct texts after {max_attempts} attempts: ")
        if samples(generator):
            raise GenerationError(common + f"{SEED_IGNORED} ({echoes} of {dropped} dropped replies repeated the text "
                                  "an earlier seed gave for the same prompt). The endpoint ignores the request's "
                                  "`seed`, so more attempts or a higher temperature cannot help; serve the model with a "
                                  "server that honours seed (vLLM, llama.cpp server) or use another generator "
                                  "(pe-kit reproduce: --set 06.generator=wordnet)")
        raise GenerationError(common + f"the generator returned the same text for different seeds ({echoes} of "
                              f"{dropped} dropped replies repeated the text an earlier seed gave for the same prompt): "
                              "these prompts have no other variation under it (WordNet: no synonym to swap), so more "
                              "attempts cannot help; use a generator with more variety (--set 06.generator=…) or "
                              "enlarge the public pool (--set 06.public_max_texts=…)")
    if len(out) < n:
        raise GenerationError(f"{generator.name}: only {len(out)} of {n} new distinct texts after {max_attempts} "
                              "attempts; raise max_attempts, sample with a higher temperature, or enlarge the "
                              "public pool (pe-kit reproduce: --set 06.max_attempts=20, --set 06.public_max_texts=…, "
                              "or fewer new texts per round with --set 06.bank_size=…)")
    return out[:n]


class PublicRetrievalGenerator:
    """Offline variation API: each prompt (a retained candidate) is answered with the nearest public text (ties →
    lowest pool index) not in ``exclude`` nor returned earlier in the call. ``texts``: the distinct public pool;
    ``embeddings``: theirs, L2-normalized; ``encoder``: for prompts neither in the pool nor ``register``-ed. Not for
    ``CachedGenerator`` (answers depend on ``exclude``). Raises ValueError on empty or duplicate texts or a shape
    mismatch."""

    raw_text_input = True
    accepts_exclude = True
    batch_size = 4096

    def __init__(self, texts: Sequence[str], embeddings: np.ndarray, encoder=None):
        texts = list(texts)
        emb = np.asarray(embeddings, dtype=np.float32)
        if not texts:
            raise ValueError("texts is empty: the public pool needs at least one text")
        if emb.ndim != 2 or emb.shape[0] != len(texts):
            raise ValueError(f"embeddings must have shape ({len(texts)}, d); got {emb.shape}")
        if len(set(texts)) != len(texts):
            raise ValueError("texts has duplicates: deduplicate the public pool (public_pool does)")
        self.texts = texts
        self.embeddings = emb
        self.encoder = encoder
        self._row = {t: i for i, t in enumerate(texts)}
        self._extra: dict[str, np.ndarray] = {}
        self.name = f"public-retrieval:{content_hash('pool', texts)[:12]}"

    def config(self) -> dict:
        """Settings that identify the outputs: ``{"pool_size": N}`` (the pool itself is in ``name``)."""
        return {"pool_size": len(self.texts)}

    def register(self, texts: Sequence[str], embeddings: np.ndarray) -> None:
        """Remember embeddings (n, d) of texts (e.g. the current bank) so prompts need no encoder."""
        emb = np.asarray(embeddings, dtype=np.float32)
        for t, e in zip(texts, emb):
            if t not in self._row:
                self._extra[t] = e

    def embedding_of(self, texts: Sequence[str]) -> np.ndarray | None:
        """float32 (n, d) embeddings of ``texts`` if every one is in the pool or registered, else None."""
        rows = []
        for t in texts:
            if t in self._row:
                rows.append(self.embeddings[self._row[t]])
            elif t in self._extra:
                rows.append(self._extra[t])
            else:
                return None
        return np.stack(rows) if rows else np.zeros((0, self.embeddings.shape[1]), np.float32)

    def _embed(self, prompts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(prompts) if t not in self._row and t not in self._extra]
        if missing:
            if self.encoder is None:
                raise ValueError(f"{len(missing)} prompts have no embedding: pass encoder= or register() them")
            self._extra.update(zip(missing, np.asarray(self.encoder.encode(missing), dtype=np.float32)))
        return self.embedding_of(prompts)

    def generate(self, prompts: Sequence[str], rng: np.random.Generator | None = None,
                 exclude: Iterable[str] = ()) -> list[str]:
        """One unused nearest public text per prompt; ValueError for a non-str prompt, GenerationError if exhausted."""
        prompts = _check_prompts(prompts)
        if not prompts:
            return []
        used = np.zeros(len(self.texts), dtype=bool)
        used[[self._row[t] for t in exclude if t in self._row]] = True
        uniq = list(dict.fromkeys(prompts))
        q = self._embed(uniq)
        sims = q @ self.embeddings.T  # (u, N); nearest in Euclidean = largest cosine for unit vectors
        order = np.argsort(-sims, axis=1, kind="stable")
        ptr = np.zeros(len(uniq), dtype=np.int64)
        slot = {t: i for i, t in enumerate(uniq)}
        out = []
        for t in prompts:
            u = slot[t]
            row = order[u]
            k = ptr[u]
            while k < row.size and used[row[k]]:
                k += 1
            if k >= row.size:
                raise GenerationError(
                    f"{self.name}: public pool of {len(self.texts)} texts is exhausted ({len(prompts)} variations "
                    "asked in this call). The pool is every public text the data holds, up to public_pool's "
                    "max_texts; in pe-kit reproduce use a generator that needs no pool (--set 06.generator=wordnet), "
                    "fewer rounds or a smaller population (--set 06.rounds=… / --set 06.bank_size=…), a larger cap "
                    "when the data has more public texts (--set 06.public_max_texts=…), or --fit-data")
            used[row[k]] = True
            ptr[u] = k + 1
            out.append(self.texts[row[k]])
        return out

    def __repr__(self) -> str:
        return f"PublicRetrievalGenerator(name={self.name!r}, pool_size={len(self.texts)})"


def public_pool(world, max_texts: int | None = None, rng: np.random.Generator | None = None,
                include_public_users: bool = False) -> list[str]:
    """Public texts for retrieval variations, disjoint from every private split (App. A "public information"): the
    unused texts of the world's bank source and, with ``include_public_users``, the records of users in no split
    (off by default: they are the corpus MAUVE scores against), less private records, bank texts and duplicates;
    ``max_texts`` keeps a uniform subset drawn from ``rng``. Raises ValueError for max_texts without rng, or if
    nothing is left."""
    from pe_kit.data.loaders import load_bank_texts

    private = {normalize_text(t) for split in ("canary", "aux", "calibration", "test") for u in world.users(split)
               for t in u.texts}
    taken = private | {normalize_text(t) for t in world.bank_texts}
    texts: list[str] = []
    bank = world.config.bank
    if bank not in ("public", "llm-label", "llm-icl"):  # generated banks have no source file
        from pe_kit.data.loaders import default_bank_b_path

        path = (None if bank == "bankA" else default_bank_b_path() if bank == "bankB"
                else bank[len("file:"):] if bank.startswith("file:") else bank)
        src, _ = load_bank_texts(path)
        texts.extend(src)
    if include_public_users:
        texts.extend(t for u in world.users("public") for t in u.texts)
    out, seen = [], set()
    for t in texts:
        k = normalize_text(t)
        if k not in taken and k not in seen:
            seen.add(k)
            out.append(t)
    if not out:
        raise ValueError("no public text is left: use a larger bank source, or a generator variation "
                         "(kind='wordnet' or 'smollm2') instead of retrieval")
    if max_texts is not None and len(out) > max_texts:
        if rng is None:
            raise ValueError("max_texts needs rng= (a numpy Generator) to draw the subset")
        keep = np.sort(rng.choice(len(out), size=int(max_texts), replace=False))
        out = [out[i] for i in keep]
    return out


def variation_generator(kind: str, *, world=None, public_texts: Sequence[str] | None = None, encoder=None,
                        base_url: str | None = None, model: str | None = None, cache: bool = True, **kwargs):
    """A variation generator by name (``VARIATION_KINDS``): ``PublicRetrievalGenerator`` over ``public_texts``
    (default ``public_pool(world)``) embedded with ``encoder`` (default ``world.encoder``), or ``LocalLMGenerator``,
    ``OpenAIChatGenerator(base_url, model)``, ``WordNetParaphraser`` built with ``kwargs`` and wrapped in
    ``CachedGenerator`` when ``cache``. Raises ValueError for an unknown kind or missing arguments."""
    from pe_kit.text.generators.cached import CachedGenerator

    if kind == "public-retrieval":
        enc = encoder or (world.encoder if world is not None else None)
        if enc is None:
            raise ValueError("public-retrieval needs encoder= or world=")
        if public_texts is None:
            if world is None:
                raise ValueError("public-retrieval needs public_texts= or world=")
            public_texts = public_pool(world)
        texts = list(public_texts)
        return PublicRetrievalGenerator(texts, enc.encode(texts, desc="public pool"), encoder=enc)
    if kind == "smollm2":
        from pe_kit.text.generators.local_lm import LocalLMGenerator

        g = LocalLMGenerator(**kwargs)
    elif kind == "openai":
        if not base_url or not model:
            raise ValueError("kind='openai' needs base_url= (e.g. 'http://localhost:8000/v1') and model=")
        from pe_kit.text.generators.openai_chat import OpenAIChatGenerator

        g = OpenAIChatGenerator(base_url, model, **kwargs)
    elif kind == "wordnet":
        from pe_kit.text.generators.wordnet import WordNetParaphraser

        g = WordNetParaphraser(**kwargs)
    else:
        raise ValueError(f"kind={kind!r} is unknown; use one of {VARIATION_KINDS}")
    return CachedGenerator(g) if cache else g

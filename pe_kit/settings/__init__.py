"""Every setting of the kit, declared once as a :func:`setting` field of a section (``sections``), checked by
:func:`check_param` (``fields``) and addressed in the :class:`Preset` tree (``tree``).
"""
from pe_kit.settings.fields import (PARAM_TYPES, ParamSpec, Section, check_param, closest, did_you_mean, setting,
                                    slider_range)
from pe_kit.settings.sections import (ARMS, COUNT, FORMATS, LEVEL, RECORD_CAP, REPEATS, THRESHOLD_RULES, Ablations,
                                      AuditConfig, AuditSettings, ImplementationAudit, LLRChecks, MechanismConfig,
                                      MechanismSettings, MultiRound, NotebookSection, OneRun, RunnerSettings,
                                      StudySettings, WorldSettings, record_cap_setting)
from pe_kit.settings.tree import (MECHANISM_KEYS, NOTEBOOK_READS, NOTEBOOK_SECTIONS, NOTEBOOKS, RUNNER_KEYS, SECTIONS,
                                  SHORT, Preset, locate, notebook_keys, notebook_stem, parameters_cell, parse_override)

__all__ = ["ParamSpec", "COUNT", "RECORD_CAP", "REPEATS", "LEVEL", "PARAM_TYPES", "Section", "setting",
           "record_cap_setting", "check_param", "closest", "did_you_mean", "slider_range", "ARMS", "FORMATS",
           "THRESHOLD_RULES",
           "WorldSettings", "MechanismSettings", "MechanismConfig", "AuditSettings", "AuditConfig", "StudySettings",
           "RunnerSettings", "NotebookSection", "LLRChecks", "Ablations", "MultiRound", "ImplementationAudit",
           "OneRun", "Preset", "SECTIONS", "NOTEBOOKS", "NOTEBOOK_SECTIONS", "NOTEBOOK_READS", "RUNNER_KEYS",
           "MECHANISM_KEYS", "SHORT", "notebook_keys", "notebook_stem", "locate", "parameters_cell", "parse_override"]

"""The settings as ``pe_kit.audit`` and two black-box modules import them; each is declared in :mod:`pe_kit.settings`."""
from pe_kit.settings import COUNT, AuditConfig, MechanismConfig, MechanismSettings, ParamSpec, check_param, closest

__all__ = ["COUNT", "AuditConfig", "MechanismConfig", "MechanismSettings", "ParamSpec", "check_param", "closest"]

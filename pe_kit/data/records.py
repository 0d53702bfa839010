"""The loaders' shared vocabulary: ``DataError``, ``User``, ``Corpus`` and the on-error policy (:func:`fail`): a bad
line raises ``DataError`` naming file, physical line and field, or with ``on_error="skip"`` is counted.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

__all__ = ["DataError", "User", "Corpus", "fail", "reserved_ids", "LINE_RULES"]

#: Skip rules that count lines (each line held one record).
LINE_RULES = ("malformed_line", "malformed_quote", "bad_encoding", "missing_field", "bad_label", "bad_type",
               "label_conflict")


class DataError(ValueError):
    """A data file cannot be read as documented; the message names file, line and field."""


@dataclass(frozen=True)
class User:
    """One user's capped records. ``texts``: tuple of str (≤ m); ``label``: str (industry, stars, polarity)."""

    user_id: str
    texts: tuple[str, ...]
    label: str


@dataclass
class Corpus:
    """Users in file order (unique ids) and the counts of loading.

    ``skipped``: skip rule → lines (:data:`LINE_RULES`, ``empty_text``, ``over_record_cap``) or users
    (``user_too_few_records``, ``user_too_many_records``, ``user_beyond_max_users``, ``not_in_<arm>_arm``);
    ``removed``: skip rule → records removed; ``changed``: rewrite rule → records rewritten
    (``whitespace_normalised``, ``cut_to_140_chars``); ``decoding``: ``utf-8`` or ``latin-1``."""

    users: list[User]
    source: str
    skipped: Counter = field(default_factory=Counter)
    removed: Counter = field(default_factory=Counter)
    changed: Counter = field(default_factory=Counter)
    decoding: str = "utf-8"

    def __len__(self) -> int:
        return len(self.users)

    def by_id(self) -> dict[str, User]:
        return {u.user_id: u for u in self.users}

    def repeats(self) -> tuple[int, int]:
        """(records repeating an earlier (user_id, text) pair, users holding such records)."""
        per = [len(u.texts) - len(set(u.texts)) for u in self.users]
        return sum(per), sum(n > 0 for n in per)

    def report(self) -> dict:
        """Flat counts: users, records (total, min/median/max per user), repeats, ``skipped_<rule>``,
        ``records_removed_<rule>``, ``records_removed_total``, ``records_changed_<rule>``, ``decoding``."""
        n = np.array([len(u.texts) for u in self.users]) if self.users else np.zeros(1, int)
        repeated, users_with = self.repeats()
        return {"source": self.source, "users": len(self.users), "records": int(n.sum()),
                "records_min": int(n.min()), "records_median": float(np.median(n)), "records_max": int(n.max()),
                "records_repeated": repeated, "users_with_repeats": users_with,
                **{f"skipped_{k}": v for k, v in sorted(self.skipped.items())},
                **{f"records_removed_{k}": v for k, v in sorted(self.removed.items())},
                "records_removed_total": int(sum(self.removed.values())),
                **{f"records_changed_{k}": v for k, v in sorted(self.changed.items())}, "decoding": self.decoding}


def reserved_ids(reserved) -> set[str]:
    """``reserved`` (the users kept out of every private split: bank B's example authors) as a set of str ids.
    Raises TypeError for a single string or None."""
    if reserved is None or isinstance(reserved, (str, bytes)):
        raise TypeError(f"reserved={reserved!r} must be a collection of user ids (e.g. a set, or "
                        "data.loaders.bank_b_authors()), not a single id or None; pass reserved=() for none")
    return {str(u) for u in reserved}


def fail(on_error: str, skipped: Counter, reason: str, message: str) -> None:
    """The on-error policy for one bad line: ``"skip"`` counts it under ``reason``; ``"raise"`` raises
    ``DataError(message)`` with the hint how to skip; ``"strict"`` without it (bank B)."""
    if on_error == "skip":
        skipped[reason] += 1
        return
    if on_error == "strict":
        raise DataError(message.replace(" or pass on_error='skip'", "") + "; every line of this file is needed: "
                        "fix or rebuild it")
    hint = "pe-kit reproduce: --set on_error=skip"
    if "on_error=" in message:
        message += f" ({hint})"
    else:
        message += f"; or pass on_error='skip' to count and drop such lines ({hint})"
    raise DataError(message)

"""Arms and splits (§3, App. D): cut records to a length, the long / short arms, seeded disjoint user splits."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from pe_kit.data.loaders import TWEET_LENGTH, Corpus, User
from pe_kit.data.records import reserved_ids


def cut_to_length(text: str, max_chars: int) -> str:
    """Cut ``text`` to at most ``max_chars`` characters on a word boundary (a single long word is cut)."""
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars + 1].rsplit(" ", 1)[0]
    return cut if 0 < len(cut) <= max_chars else text[:max_chars]


def make_arm(corpus: Corpus, arm: str, record_cap: int = 64) -> Corpus:
    """The paper's data arms (§3, App. D): ``long`` keeps users with exactly ``record_cap`` records; ``short`` those
    with record_cap/2 … record_cap, cut to 140 characters. Raises ValueError for another arm name."""
    changed = Counter(corpus.changed)
    if arm == "long":
        users = [u for u in corpus.users if len(u.texts) == record_cap]
    elif arm == "short":
        fit = [u for u in corpus.users if record_cap // 2 <= len(u.texts) <= record_cap]
        users = [User(u.user_id, tuple(cut_to_length(t, TWEET_LENGTH) for t in u.texts), u.label) for u in fit]
        changed["cut_to_140_chars"] += sum(len(t) > TWEET_LENGTH for u in fit for t in u.texts)
    else:
        raise ValueError(f"arm={arm!r} must be 'long' or 'short'")
    skipped, removed = Counter(corpus.skipped), Counter(corpus.removed)
    kept = {u.user_id for u in users}
    skipped[f"not_in_{arm}_arm"] += len(corpus.users) - len(users)
    removed[f"not_in_{arm}_arm"] += sum(len(u.texts) for u in corpus.users if u.user_id not in kept)
    return Corpus(users, f"{corpus.source} [{arm} arm]", skipped, removed, +changed, corpus.decoding)


def empty_arm_message(corpus: Corpus, arm: str, record_cap: int) -> str:
    """The error text when ``make_arm(corpus, arm, record_cap)`` keeps no user, naming a ``record_cap`` that would."""
    if not corpus.users:
        return (f"corpus {corpus.source} holds no users (report: {corpus.report()}): check the file, its format "
                "(fmt=… / --format) and on_error")
    most = max(len(u.texts) for u in corpus.users)
    need = f"exactly record_cap={record_cap}" if arm == "long" else f"{record_cap // 2}–{record_cap}"
    return (f"corpus {corpus.source} has {len(corpus.users)} users but none with {need} records, which the {arm} "
            f"arm (and every canary) needs; most records of a user: {most}: lower record_cap to {most} "
            f"(pe_kit.MechanismConfig(record_cap={most}) / StudyConfig(record_cap={most}); pe-kit reproduce: "
            f"--set record_cap={most} or --fit-data)")


@dataclass(frozen=True)
class Splits:
    """Disjoint user-id lists: canary | aux | calibration | test | public (the rest), seeded."""

    canary: tuple[str, ...]
    aux: tuple[str, ...]
    calibration: tuple[str, ...]
    test: tuple[str, ...]
    public: tuple[str, ...]
    seed: int

    def report(self) -> dict:
        return {name: len(getattr(self, name)) for name in ("canary", "aux", "calibration", "test", "public")}


def split_users(corpus: Corpus, n_canary: int, n_aux: int = 500, n_calibration: int = 500, n_test: int = 1000,
                seed: int = 0, canary_records: int | None = None, reserved=()) -> Splits:
    """Seeded disjoint user splits (App. D); users left over form ``public``.

    ``canary_records``: canaries only from users with exactly this many records (§3); ``reserved``: user ids kept
    out of the private splits (``data.loaders.bank_b_authors``), their places going to the next users of the same
    permutation. Raises ValueError for a size < 1 (``n_canary`` < 0) or too few eligible users, TypeError for a
    string or None as ``reserved``."""
    for name, n in (("n_aux", n_aux), ("n_calibration", n_calibration), ("n_test", n_test)):
        if n < 1:
            raise ValueError(f"{name}={n} must be ≥ 1")
    if n_canary < 0:
        raise ValueError(f"n_canary={n_canary} must be ≥ 0")
    rng = np.random.default_rng(seed)
    ids = [u.user_id for u in corpus.users]
    if len(set(ids)) != len(ids):
        raise ValueError("corpus has duplicate user ids; merge them before splitting")
    order = [ids[i] for i in rng.permutation(len(ids))]
    keep_out = reserved_ids(reserved)
    lengths = {u.user_id: len(u.texts) for u in corpus.users}
    fits = [i for i in order if canary_records is None or lengths[i] == canary_records]
    eligible = [i for i in fits if str(i) not in keep_out]  # ids compared as text (reserved_ids)
    if len(eligible) < n_canary:
        most = max(lengths.values(), default=0)
        if not ids:
            raise ValueError(f"corpus {corpus.source} holds no users (an arm admits only users with the records it "
                             f"needs: the long arm exactly record_cap={canary_records}); lower record_cap to the "
                             "record count your users have, choose the other arm, or add --fit-data")
        held = len(fits) - len(eligible)
        why = (f" ({held} more are reserved as bank-B example authors, kept out of every private split; a bank "
               "other than bankB reserves none)") if held else ""
        if canary_records is not None and not fits:
            raise ValueError(f"corpus {corpus.source} has {len(ids)} users but none with exactly record_cap="
                             f"{canary_records} records, which every canary needs (§3; most records of a user: "
                             f"{most}); lower record_cap (e.g. --set record_cap={most}) or add --fit-data to fit "
                             "the sizes to the data")
        fix = (f"lower n_canary (--set n_canary={len(eligible)}) or record_cap, or add --fit-data" if eligible else
               "lower record_cap to a record count your unreserved users have, choose another bank or corpus, or "
               "add --fit-data")
        raise ValueError(f"only {len(eligible)} users have exactly {canary_records if canary_records else 'any'} "
                         f"records{why} but n_canary={n_canary} canaries are requested; {fix}")
    canary = eligible[:n_canary]
    chosen = set(canary)
    rest = [i for i in order if i not in chosen and str(i) not in keep_out]
    need = n_aux + n_calibration + n_test
    if len(rest) < need:
        held = len(keep_out & set(map(str, ids)))
        free = len(ids) - held
        why = (f", {held} of them reserved as bank-B example authors (kept out of every private split; a bank other "
               f"than bankB reserves none), so {free} can be split") if held else ""
        raise ValueError(f"corpus {corpus.source} has {len(ids)} users{why}; n_canary={n_canary} + n_aux={n_aux} + "
                         f"n_calibration={n_calibration} + n_test={n_test} = {n_canary + need} needed. Lower these "
                         "settings (--set n_aux=…; n_calibration and n_test stay equal) so they sum to at most "
                         f"{free} (leave users over for a 'public' bank), add --fit-data to fit them to the "
                         "data, or pass a corpus with more users via --data")
    a, b = n_aux, n_aux + n_calibration
    private = chosen | set(rest[:b + n_test])
    return Splits(tuple(canary), tuple(rest[:a]), tuple(rest[a:b]), tuple(rest[b:b + n_test]),
                  tuple(i for i in order if i not in private), seed)

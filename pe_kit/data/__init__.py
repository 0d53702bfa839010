"""Stage 1 — data: user-partitioned text in, capped users and seeded disjoint splits out (paper §3, App. D).

Modules: ``records`` (``DataError``, ``User``, ``Corpus``), ``passes`` (two streaming passes), ``loaders`` (Blogs /
Yelp / Sentiment140, bank files), ``corpus_cache`` (a selection stored by content), ``splits`` (record cap, arms,
canary | aux | calibration | test splits).
"""

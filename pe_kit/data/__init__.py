"""Stage 1 — data: user-partitioned text in, capped users and seeded disjoint splits out.

Modules: ``loaders`` (Blogs / Yelp / Sentiment140 readers, bundled data, bank files), ``splits`` (record
cap, long / short arms, canary | aux | calibration | test splits). Paper §3, App. D.
"""

"""Stage 1 — data: user-partitioned text in, capped users and seeded disjoint splits out.

Modules: ``records`` (``DataError``, ``User``, ``Corpus``, the on-error policy), ``passes`` (two streaming
passes: records per user, then the admitted users' first m records), ``loaders`` (Blogs / Yelp / Sentiment140
readers, bundled data, bank files), ``corpus_cache`` (a selection stored by content, read by every notebook of a
run), ``splits`` (record cap, long / short arms, canary | aux | calibration | test splits). Paper §3, App. D.
"""

from pe_kit.lazy import lazy_package

__getattr__, __dir__ = lazy_package(__name__, __file__)

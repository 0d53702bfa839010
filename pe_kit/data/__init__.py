"""Stage 1 — data: user-partitioned text in, capped users and seeded disjoint splits out (paper §3, App. D)."""

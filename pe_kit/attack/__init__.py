"""Attack design: the variants (Table 1, App. B), greedy probe selection (Alg. B.1, Eq. 6), bug canaries."""

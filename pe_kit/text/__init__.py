"""Text models: encoders, offline models, generators, candidate banks (App. C), PE variation (Alg. A.1 l. 23–24)."""

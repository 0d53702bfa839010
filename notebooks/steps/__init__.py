"""The notebooks' own step modules: the computations behind notebooks 01–06 and 08 on the public pe_kit names."""

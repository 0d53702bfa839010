"""The notebooks' own step modules and figures: the computations behind notebooks 01–08, built on pe_kit."""

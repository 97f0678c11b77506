"""Pure maths shared by methods: GMM splits, spectral pieces, vMF mixtures, correlations. No I/O."""

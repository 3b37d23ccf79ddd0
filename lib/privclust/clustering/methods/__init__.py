"""The clustering methods, one module each: its plan (its releases and their sensitivities), its
run and its public function, registered by name in privclust.clustering.registry.

Above the mechanisms, below the entry points; no method imports another. Public, and listed once
in privclust.clustering: `pe_means`, `hdpe_means`, `fastlloyd`, `lsh_coreset`, `pe_lloyd`.
"""

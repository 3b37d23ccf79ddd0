"""The clustering methods, one module each: its plan (its releases and their sensitivities), its
run and its public function, registered by name in privclust.clustering.registry.

Above the mechanisms, below the entry points; no method imports another. pe-lloyd's own parts
sit beside it: its chains of Lloyd steps (lloyd_chain) and its path above its projection
threshold (pe_lloyd_projected). Public, and listed once in privclust.clustering: `pe_means`,
`hdpe_means`, `fastlloyd`, `lsh_coreset`, `pe_lloyd`.
"""

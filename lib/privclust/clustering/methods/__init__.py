"""The clustering methods, one module each: its plan (its releases and their sensitivities), its
run and its public function, registered by name in privclust.clustering.registry."""

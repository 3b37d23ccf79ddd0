"""A run's skeleton: its options (one frozen object), its plan (the budget split into the
releases, their sensitivities and noise), the price of its summaries, the method protocol every
method fills in, the runner that reads the rows and draws the run's own noisy count, and the
result a run returns.

Above the rows (privclust.clustering.data), below the mechanisms and the methods. Public, and
listed once in privclust.clustering: `RunPlan`, `ClusteringResult`, `DEFAULT_MAX_POPULATION`,
`DEFAULT_PROJECTION_DIM`, `SWEEP_SUMMARY_FRACTION`; the rest is internal.
"""

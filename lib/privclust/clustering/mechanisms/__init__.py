"""The mechanisms several methods share: noisy grid sums and means (grid), the private Lloyd
step (lloyd), the LSH tree of the coreset (lsh_tree), PE-means as a run's search stage (search),
and the projected stage of HDPE-means and pe-lloyd (projection).

Above private evolution's machinery (privclust.clustering.evolution) and a run's skeleton,
below the methods. Nothing here is public; the methods in privclust.clustering.methods are.
"""

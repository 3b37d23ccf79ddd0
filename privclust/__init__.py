"""privclust as a library: differentially private k-means as a scikit-learn estimator.

`PrivateKMeans` runs the same clustering code as the service's workers
(`app.clustering.cluster`), on rows the caller holds, with a domain the caller declares.
"""

from privclust.estimator import PrivateKMeans

__all__ = ["PrivateKMeans"]

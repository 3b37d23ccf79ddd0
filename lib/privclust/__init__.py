"""privclust as a library: differentially private k-means, importing nothing from the service.

`privclust.clustering` and `privclust.privacy` are the pure math the service's workers run;
`PrivateKMeans` wraps them as a scikit-learn estimator for rows the caller holds, with a domain
the caller declares. It is imported on first use, so that the service can import the privacy
accounting without loading scikit-learn.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from privclust.estimator import PrivateKMeans

__all__ = ["PrivateKMeans"]


def __getattr__(name: str) -> Any:
    if name == "PrivateKMeans":
        from privclust.estimator import PrivateKMeans

        return PrivateKMeans
    raise AttributeError(f"module 'privclust' has no attribute {name!r}")

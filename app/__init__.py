"""privclust: differentially private k-means clustering as a self-hosted service."""

__version__ = "0.1.0"

"""What a run's released centres are told with: their private summaries (sizes and loss,
summaries), the figures' uncertainty and warnings (uncertainty), and a plan's expected accuracy
(accuracy).

Above the mechanisms (accuracy models their noise), beside the methods, below the entry points
(privclust.clustering.dispatch, privclust.clustering.sweeps). Public, and listed once in
privclust.clustering: `nearest_centre_blocks`; the service also reads uncertainty's warnings
and accuracy's estimates.
"""

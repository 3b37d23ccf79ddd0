"""The rows and their declared domain: the bounds every input is checked against (limits), the
box's public per-column scales (scaling), rows clipped into the declared ball (domain) and the
passes that every method reads the rows through, in this process or over partitions (rows).

The floor above privclust.clustering's vocabulary (choices, errors): it imports nothing else of
the package. Public, and listed once in privclust.clustering: `clip_into_ball`, `prepare_rows`.
The service and privclust.distributed also use rows' tables and engines, scaling's `Box` and
the limits' bounds; the rest is internal.
"""

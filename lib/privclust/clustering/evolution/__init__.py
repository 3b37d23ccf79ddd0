"""Private evolution's machinery (docs/algorithms.md section 4): the candidate population
(packing), its variations (variation), each row's vote for its nearest candidate (nearest,
vote_cells, vote, with the numba kernels), the noisy histogram's post-processing (histogram),
the selection of the next centres (selection), and the loop that runs them (evolution).

Above a run's skeleton (privclust.clustering.run), below the mechanisms and the methods built
on it. Nothing here is public; the methods in privclust.clustering.methods are.
"""

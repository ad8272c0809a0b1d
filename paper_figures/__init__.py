"""Tables and figures of the paper, regenerated from the finished runs (``python -m paper_figures``).

``load`` reads run folders; ``stats`` holds the t intervals and rliable's aggregates; ``bootstrap`` the intervals
that resample training seeds (then episodes); ``tables``, ``control``, ``premise`` (whether each method got its
signal) and ``credit`` build the tables, ``plots`` the figures; ``render`` formats and writes them; ``grid``
expands a profile's grid (also used by the Snakefile); ``against`` compares a grid with a published one;
``build.build`` runs everything.
"""

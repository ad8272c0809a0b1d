"""Tables and figures of the paper, regenerated from the finished runs (``python -m paper_figures``).

``load`` reads run folders; ``stats`` holds the t intervals, rliable's aggregates, the Bonferroni level and the
seeds a paired gain needs; ``bootstrap`` the intervals that resample training seeds (then episodes, or paired
seeds for a comparison); ``tables``, ``control`` (gains paired by seed), ``oracle_share`` (share of the oracle's
gain, power), ``premise`` (whether each method got its signal) and ``credit`` build the tables, ``plots`` the
figures; ``render`` formats and writes them; ``grid`` expands a profile's grid (also used by the Snakefile);
``against`` compares a grid with a published one; ``build.build`` runs everything.
"""

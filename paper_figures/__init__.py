"""Tables and figures of the paper, regenerated from the finished runs (``python -m paper_figures``).

``load`` reads run folders; ``stats`` holds the CI math and the rliable statistics; ``tables`` and ``plots``
build the outputs; ``render`` formats and writes them; ``grid`` expands a profile's grid (also used by the
Snakefile); ``build.build`` runs everything.
"""

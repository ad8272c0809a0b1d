"""The grid of runs a profile asks for: seeds × methods × benchmarks (× settings), its control arms (frozen,
compute-matched GRPO), and each run's expected config identity. The Snakefile, ``perf/`` and
``paper_figures/`` all read it from here."""

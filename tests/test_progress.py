"""Progress output: plain periodic lines when stderr is not a terminal (Snakemake and SLURM logs)."""
from __future__ import annotations

import io

from harness.progress import plain_lines, progress


def test_plain_lines_print_on_the_period_and_at_the_end():
    ticks = iter([0.0, 10.0, 31.0, 40.0, 70.0, 75.0])  # start, then one reading after each item
    out = io.StringIO()
    items = list(plain_lines(range(5), total=5, desc="run", unit="step", every_s=30.0, stream=out,
                             clock=lambda: next(ticks)))
    assert items == [0, 1, 2, 3, 4]
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["run: 2/5 step", "run: 4/5 step", "run: 5/5 step"]
    assert lines[-1].endswith("0m00s left)")


def test_plain_lines_count_from_a_resumed_step():
    out = io.StringIO()
    list(plain_lines(range(3, 5), total=5, desc="run", initial=3, every_s=1e9, stream=out))
    assert out.getvalue().startswith("run: 5/5 it")


def test_disabled_progress_returns_the_items_untouched():
    items = [1, 2, 3]
    assert progress(items, total=3, desc="x", enabled=False) is items

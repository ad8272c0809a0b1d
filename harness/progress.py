"""Progress on long work: a bar in a terminal, plain periodic lines in a log file.

A bar redraws with carriage returns, which a Snakemake log or a SLURM output file shows as one long line (or not
at all: tqdm disables itself when stderr is not a terminal). So when stderr is not a terminal, ``progress`` prints
one line every ``every_s`` seconds (and at the end) with the count, the rate and the time left.
"""
from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return (f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600
            else f"{seconds // 60}m{seconds % 60:02d}s")


def plain_lines(items: Iterable[T], total: int, desc: str, unit: str = "it", initial: int = 0,
                every_s: float = 30.0, stream: TextIO | None = None, clock=time.monotonic) -> Iterator[T]:
    """Yield ``items``; after each, print ``desc: done/total unit (rate, time left)`` when ``every_s`` has
    passed since the last line, and once after the last item."""
    stream = stream or sys.stderr
    started = last = clock()
    done = initial
    for item in items:
        yield item
        done += 1
        now = clock()
        if now - last >= every_s or done == total:
            rate = (done - initial) / max(now - started, 1e-9)
            left = (total - done) / rate if rate > 0 else float("inf")
            eta = _duration(left) if left != float("inf") else "?"
            print(f"{desc}: {done}/{total} {unit} ({rate:.2f} {unit}/s, {eta} left)", file=stream, flush=True)
            last = now


def progress(items: Iterable[T], total: int, desc: str, unit: str = "it", initial: int = 0,
             enabled: bool = True, every_s: float = 30.0) -> Iterable[T]:
    """A tqdm bar when stderr is a terminal, else :func:`plain_lines`; ``items`` unchanged when not ``enabled``
    (e.g. on every FSDP rank but rank 0)."""
    if not enabled:
        return items
    if sys.stderr.isatty():
        from tqdm.auto import tqdm

        return tqdm(items, desc=desc, unit=unit, initial=initial, total=total, dynamic_ncols=True)
    return plain_lines(items, total, desc, unit=unit, initial=initial, every_s=every_s)

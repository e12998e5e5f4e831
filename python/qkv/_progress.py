"""A one-line progress bar on stderr (no dependency on tqdm)."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    """Prints ``desc: done/total [###....] 40% 12.3 it/s`` on one line, redrawn at most 10 times a second."""

    def __init__(self, desc: str, total: int) -> None:
        self.desc, self.total = desc, total
        self.start = self.last = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < 0.1:
            return
        self.last = now
        frac = done / total if total else 1.0
        rate = done / max(now - self.start, 1e-9)
        bar = "#" * int(frac * 20)
        sys.stderr.write(f"\r{self.desc}: {done}/{total} [{bar:<20}] {frac:4.0%} {rate:.1f} it/s")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

"""Progress of a ``minijinja-py dataset`` run on stderr.

On a terminal: one line redrawn in place (a bar, the percentage, rows, rows per second, the
estimated time left, failed rows). Elsewhere (a log file, a CI job): a plain line every
``interval`` seconds, since carriage returns would pile up there. The fraction done is measured
in input bytes (rows for Parquet, in the file's share of the input's bytes), so it is known
without counting the rows of a JSON Lines file first.
"""

from __future__ import annotations

import time
from typing import Optional, TextIO

__all__ = ["Progress", "format_duration"]

_BAR_WIDTH = 24
_REDRAW = 0.1  # seconds between redraws of the terminal line


def format_duration(seconds: float) -> str:
    """``0:07``, ``12:03``, ``1:02:03``."""
    seconds = max(int(round(seconds)), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """``mode`` is ``"bar"`` (a terminal), ``"lines"`` or ``"none"``. ``rows`` and ``done``
    (fraction) start where a resumed run starts; rates count this run's rows only."""

    def __init__(self, stream: TextIO, mode: str, interval: float, rows: int = 0,
                 done: float = 0.0, total_rows: Optional[int] = None) -> None:
        self.stream = stream
        self.mode = mode
        self.interval = interval
        self.total_rows = total_rows
        self.start_rows = self.rows = rows
        self.start_done = self.done = done
        self.failed = 0
        self.started = time.monotonic()
        # plain lines wait an interval; the bar shows at the first chance
        self.last_shown = self.started if mode == "lines" else float("-inf")
        self.width = 0

    def update(self, rows: int, failed: int, done: float) -> None:
        """After a batch is written: the totals so far."""
        self.rows, self.failed, self.done = rows, failed, done
        self.tick()

    def tick(self) -> None:
        """Show the state if it is time to (called often, also while waiting)."""
        now = time.monotonic()
        if self.mode == "bar" and now - self.last_shown >= _REDRAW:
            self._draw(now)
        elif self.mode == "lines" and now - self.last_shown >= self.interval:
            self.last_shown = now
            print(f"minijinja-py dataset: {self._status(now, plain=True)}", file=self.stream,
                  flush=True)

    def close(self) -> None:
        """Clear the terminal line (the summary follows)."""
        if self.mode == "bar" and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()

    # -- text -------------------------------------------------------------------------------
    def _rate(self, now: float) -> float:
        elapsed = now - self.started
        return (self.rows - self.start_rows) / elapsed if elapsed > 0 else 0.0

    def _eta(self, now: float) -> Optional[float]:
        progressed = self.done - self.start_done
        if progressed <= 0:
            return None
        return (now - self.started) * (1.0 - self.done) / progressed

    def _status(self, now: float, plain: bool) -> str:
        rows = f"{self.rows:,}" + (f"/{self.total_rows:,}" if self.total_rows else "") + " rows"
        parts = [f"{self.done * 100:3.0f}%", rows, f"{self._rate(now):,.0f} rows/s"]
        eta = self._eta(now)
        parts.append(f"ETA {format_duration(eta)}" if eta is not None else "ETA ?")
        if self.failed:
            parts.append(f"{self.failed:,} failed")
        return (", " if plain else "  ").join(parts)

    def _draw(self, now: float) -> None:
        self.last_shown = now
        filled = int(self.done * _BAR_WIDTH)
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        text = f"[{bar}] {self._status(now, plain=False)}"
        padding = " " * max(self.width - len(text), 0)
        self.width = len(text)
        self.stream.write("\r" + text + padding)
        self.stream.flush()

"""How a long fetch shows its progress, fitting pytest's own output.

- On a terminal: while tests wait for replies, "orbench: 812/1974 replies (41%), 64.9/s, ETA 18 s,
  0 errors so far" is shown at the end of pytest's current line, updated in place about once a
  second, and erased (backspaces, so pytest's coloured output stays as it was) before pytest writes
  again. Nothing is left behind in the scrollback.
- Otherwise (CI logs, pipes): a line of its own every `progress_every` seconds (10 by default; three
  times as long with -q; none with -qq or progress_every 0), written where pytest's line is complete
  (after a row of dots and its percentage) so that no row is split; a row that
  stays open OVERDUE seconds longer (a stalled endpoint) gets the line anyway.

Under xdist the controller fetches and the workers wait, so nothing reaches the controller while
every worker waits: a thread there shows the progress once no test has finished for a second
(pytest is idle then), and the report hook erases it before pytest writes the next result.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

IN_PLACE_EVERY = 1.0  # seconds between updates of the status on a terminal
IDLE = 1.0  # xdist controller: no result for this long means every worker waits
OVERDUE = 30.0  # logs: seconds a due progress line waits at most for the end of pytest's row


class ProgressDisplay:
    def __init__(self, config: pytest.Config, source: Callable[[], str | None], every: float = 10.0) -> None:
        self.config = config
        self.source = source  # the progress text, or None when there is nothing to say
        self.verbosity = config.get_verbosity()
        self.every = every * (3 if self.verbosity < 0 else 1)  # between lines in logs; 0 = none
        self._lock = threading.Lock()
        self._shown = 0  # characters of status now at the end of the current line
        self._last = time.monotonic()  # of the last status update or line
        self._last_result = time.monotonic()
        self._due_since = 0.0  # logs: when a progress line fell due while pytest's row was open
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def reporter(self) -> Any:
        return self.config.pluginmanager.get_plugin("terminalreporter")  # registered after this plugin

    @property
    def in_place(self) -> bool:
        reporter = self.reporter
        return bool(reporter is not None and reporter.isatty and self.verbosity >= -1)

    def _uncaptured(self) -> Any:
        """Tests wait inside pytest's output capture: write past it, as live logging does."""
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        return capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()

    # -- called while a test waits (main thread), or by the idle watch (xdist controller) ------------
    def waiting(self) -> None:
        reporter = self.reporter
        if reporter is None or self.verbosity < -1:
            return
        now = time.monotonic()
        in_place = self.in_place
        # Decided before touching the capture: suspending and resuming it costs more than a test
        # (measured: a warm run of 1,974 prompts took 2.6 s instead of 1.9 s when it was done per test).
        if not (in_place and (now - self._last >= IN_PLACE_EVERY or not self._shown)
                or not in_place and self.every and now - self._last >= self.every):
            return
        if not in_place and self._mid_row(reporter):
            self._due_since = self._due_since or now
            if now - self._due_since < OVERDUE:
                return  # the next result that ends pytest's row writes it
        self._due_since = 0.0
        text = self.source()
        if text is None and not self._shown:
            return
        with self._lock, self._uncaptured():
            if in_place:
                self._show(text)
            elif text is not None:
                self._write_log_line(reporter, text)
            self._last = now

    def _mid_row(self, reporter: Any) -> bool:
        """Whether pytest's current line is a row of results still being written: a line between would leave it
        without its percentage. A row with no result yet, and a -v line (pytest writes the test's name again
        before its result, as with live logs), are not."""
        if self.verbosity > 0 or not isinstance(reporter.currentfspath, os.PathLike):
            return False
        tw = self.config.get_terminal_writer()
        prefix = os.path.relpath(reporter.currentfspath, reporter.startpath) + " "  # "orbench/toxic "
        line = getattr(tw, "_current_line", None)  # pytest's TerminalWriter keeps the line it is writing
        if isinstance(line, str):
            # A row pytest wrapped goes on without the file name: its first results are a row already begun
            # (a line there cut it short, without its percentage, as a busy endpoint showed).
            return line not in ("", prefix) and tw.width_of_current_line < tw.fullwidth - 1
        return len(prefix) < tw.width_of_current_line < tw.fullwidth - 1  # a complete row ends with its percentage

    def _write_log_line(self, reporter: Any, text: str) -> None:
        """A progress line in a log. Within a row of results pytest writes each test's letter where the line is,
        so the row goes on after the progress line under its file name again, as it began (a lone "." below it
        otherwise); a -v line is written again by pytest itself."""
        tw = self.config.get_terminal_writer()
        if isinstance(reporter.currentfspath, os.PathLike) and tw.width_of_current_line:
            tw.line()
            tw.line(text)
            tw.write(os.path.relpath(reporter.currentfspath, reporter.startpath) + " ", flush=True)
        else:
            reporter.write_line(text)

    def done_waiting(self) -> None:
        """Before pytest writes again: the status goes."""
        with self._lock:
            if self._shown:
                with self._uncaptured():
                    self._erase()
            self._last_result = time.monotonic()

    def result(self) -> None:
        """A test finished (controller): logs get their periodic line even when no test waits long."""
        self.done_waiting()
        if not self.in_place:
            self.waiting()

    # -- xdist controller --------------------------------------------------------------------------
    def watch_idle(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._watch, name="orbench-progress", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stopping.wait(0.25):
            if time.monotonic() - self._last_result >= IDLE:
                self.waiting()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.done_waiting()

    # -- in place ----------------------------------------------------------------------------------
    def _show(self, text: str | None) -> None:
        self._erase()
        if text is None:
            return
        tw = self.config.get_terminal_writer()
        room = tw.fullwidth - tw.width_of_current_line - 3
        if room < 20:
            return  # pytest's line is about full; it wraps soon and the next wait shows it
        status = "  " + text[:room]
        tw.write_raw(status, flush=True)  # raw: pytest's idea of the current line stays right
        self._shown = len(status)

    def _erase(self) -> None:
        if self._shown:
            n = self._shown
            self.config.get_terminal_writer().write_raw("\b" * n + " " * n + "\b" * n, flush=True)
            self._shown = 0

"""What every command shares: the one console, the error that ends a command, JSON output.

Commands return their exit code; :class:`Abort` ends one with a message. ``main`` turns both (and
click's own errors) into the process exit status — the one exit path. rich is imported on first
use, so ``--help`` stays instant.
"""

from __future__ import annotations

import json
import sys

WIDE = 120


class Abort(Exception):
    """End the command: print ``message`` on stderr and exit with ``code``."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.message = message
        self.code = code


class Application:
    def __init__(self) -> None:
        self._out = None
        self._err = None

    @property
    def console(self):
        """stdout console (tables, summaries)."""
        if self._out is None:
            from rich.console import Console

            # off a terminal (pipes, CI logs) use a wide fixed width instead of rich's 80 columns
            self._out = Console(highlight=False, width=None if sys.stdout.isatty() else WIDE)
        return self._out

    @property
    def err(self):
        """stderr console (errors, progress); progress shows only on a terminal."""
        if self._err is None:
            from rich.console import Console

            self._err = Console(stderr=True, highlight=False, soft_wrap=True)  # messages stay one line
        return self._err

    def error(self, message: str) -> None:
        from rich.markup import escape

        self.err.print(f"[red]error:[/red] {escape(message)}")

    def print_json(self, data) -> None:
        """A table's ``--json`` twin: plain JSON on stdout, never wrapped or coloured."""
        self.console.out(json.dumps(data, indent=2, default=str), highlight=False)

    def status(self, message: str):
        """A spinner on stderr when it is a terminal; a no-op context otherwise."""
        import contextlib

        if self.err.is_terminal:
            return self.err.status(message)
        return contextlib.nullcontext()


app = Application()

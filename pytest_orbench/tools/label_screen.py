"""The label screen's terminal: untrusted text (prompts, replies, names) shown inert and wrapped, and keys
read one at a time with the terminal's modes restored on the way out."""

from __future__ import annotations

import os
import re
import textwrap
import unicodedata
from typing import Any, TextIO


def visible(line: str) -> str:
    """A line of a prompt or reply as plain text: control, bidi and other invisible characters are shown as
    [U+XXXX] (never sent to the terminal: no escape sequence, no cursor move, no reordered text)."""
    out = []
    for ch in line.replace("\t", "    "):
        category = unicodedata.category(ch)
        if category in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            out.append(f"[U+{ord(ch):04X}]")
        else:
            out.append(ch)
    return "".join(out)


def wrapped(text: str, width: int) -> list[str]:
    lines: list[str] = []
    for raw in re.split(r"\r\n|\r|\n", text):
        shown = visible(raw)
        lines.extend(textwrap.wrap(shown, width=max(20, width), replace_whitespace=False, drop_whitespace=True,
                                   break_long_words=True, break_on_hyphens=False) or [""])
    return lines


class Terminal:
    """Keys one at a time (no Enter), and lines out; a real terminal's modes restored on the way out."""

    def __init__(self, stdin: TextIO, stdout: TextIO) -> None:
        self.stdin, self.stdout = stdin, stdout
        self._saved: list[Any] | None = None

    def __enter__(self) -> Terminal:
        import termios
        import tty

        fd = self.stdin.fileno()
        self._saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)
        return self

    def __exit__(self, *exc: object) -> None:
        import termios

        if self._saved is not None:
            termios.tcsetattr(self.stdin.fileno(), termios.TCSADRAIN, self._saved)

    def key(self) -> str:
        data = os.read(self.stdin.fileno(), 8)
        if not data:
            return "q"  # the terminal closed: as quit
        if data.startswith(b"\x1b"):
            return ""  # an arrow or function key: ignored
        return data.decode("utf-8", "replace")[:1]

    def write(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()

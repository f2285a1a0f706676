"""Untrusted text for Markdown: escaped so it cannot inject links, mentions, HTML or formatting."""

from __future__ import annotations

import html
import re
import unicodedata

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#!|~$])")  # $: GitHub's math ($...$, $$...$$) is off when escaped
_WWW = re.compile(r"\b(www)\.", re.IGNORECASE)
_SCHEME = re.compile(r":(?=//)")
_ISSUE_REF = re.compile(r"(?<!&)#(?=\w)")  # not the # of an entity we wrote
_GH_REF = re.compile(r"\b(GH)-(?=\d)", re.IGNORECASE)  # GH-45: GitHub links it to issue 45


def visible(text: str) -> str:
    """Control, format (bidi, zero-width) and separator characters as `[U+202E]`: shown, not obeyed."""
    out = []
    for char in text:
        if char in "\n\r\t":
            out.append(" ")
        elif ord(char) < 128 and char.isprintable():
            out.append(char)
        elif unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn"):
            out.append(f"[U+{ord(char):04X}]")
        else:
            out.append(char)
    return "".join(out)


def _unlink(text: str) -> str:
    """No autolink of any GFM kind and no GitHub reference: `www.` and `scheme://` lose their trigger
    (an escaped dot, an entity for the colon: the same text on screen), and a zero-width space after
    `@`, `#` and `GH` keeps e-mail links, @mentions, #123 and GH-123 references from forming."""
    text = _WWW.sub(r"\1\\.", text)
    text = _SCHEME.sub("&#58;", text)
    text = _GH_REF.sub("\\1\u200b-", text)
    return _ISSUE_REF.sub("#\u200b", text.replace("@", "@\u200b"))


def md_escape(text: str, limit: int | None = None) -> str:
    """Untrusted text (prompts, replies, file names) for Markdown: one line, no HTML, no Markdown, no
    links, no mentions; invisible and bidi characters shown as [U+....]."""
    text = " ".join(visible(text).split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _unlink(_MD_SPECIAL.sub(r"\\\1", text))


def md_code(text: str, limit: int | None = None) -> str:
    """Untrusted text as an inline code span that survives any backticks in it (CommonMark: the fence
    is longer than any run of backticks inside). Nothing inside a code span is Markdown, HTML, an
    entity or a link, so nothing else needs escaping."""
    text = " ".join(visible(text).split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_text(text: str) -> str:
    """Our own fixed messages: no HTML, no bare links, no mentions. Not for text that quotes anything
    untrusted (a dataset name, an endpoint's error): Markdown links and images still form; use md_escape."""
    return _unlink(html.escape(" ".join(visible(text).split()), quote=False))

"""Untrusted text for Markdown: escaped so it cannot inject links, mentions, HTML or formatting; our messages' own
code spans kept as code (md_message)."""

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


def _one_line(text: str, limit: int | None) -> str:
    text = " ".join(visible(text).split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _escaped(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _unlink(_MD_SPECIAL.sub(r"\\\1", text))


def md_escape(text: str, limit: int | None = None) -> str:
    """Untrusted text (prompts, replies, file names) for Markdown: one line, no HTML, no Markdown, no
    links, no mentions; invisible and bidi characters shown as [U+....]."""
    return _escaped(_one_line(text, limit))


def md_message(text: str, limit: int | None = None) -> str:
    """One of our messages (a check's reason, a warning, the judge audit) for Markdown: its `code spans`
    (`orbench label`) as code, everything else escaped as md_escape does. A message may quote untrusted
    text (a dataset name, an endpoint's error) with backticks of its own: a span they pair up is code,
    which is as inert as escaped text (no HTML, link, mention or formatting forms inside a code span)."""
    parts = _one_line(text, limit).split("`")
    out = []
    for n, part in enumerate(parts):
        if n % 2 == 0:
            out.append(_escaped(part))
        elif n < len(parts) - 1:
            out.append(md_code(part))
        else:  # a backtick with no pair: shown as one
            out.append("\\`" + _escaped(part))
    return "".join(out)


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

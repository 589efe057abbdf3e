"""GitHub's extended autolinks (GFM spec, "Autolinks (extension)") for markdown-it.

Bare ``www.example.com``, ``https://example.com/a`` and ``someone@example.com`` become links,
the way cmark-gfm (GitHub's renderer) finds them:

- ``www.`` and ``http://``/``https://`` links are inline rules, so that emphasis never cuts
  a URL in two: ``www.`` at a ``w`` after the start of a line, a space or one of ``*_~(``;
  the scheme at its ``:``, read back from the pending text (any case, not after a letter);
- email addresses are found after inline parsing, in the text outside links (a local part
  such as ``first_last`` is split by emphasis delimiters while inline rules run, and only
  the joined text shows it whole).

A link needs a valid domain (letters, digits, ``-``, ``_``, with no ``_`` in its last two
segments; a ``www.`` one needs a period), runs to the next space, and then loses trailing
punctuation (``?!.,:*_~'"``), an unbalanced ``)``, an entity-like ``&name;`` and anything
from a ``<``. File names (``app.py``, ``README.md``) stay text: nothing here links a bare
domain without ``www.`` or a scheme. Unlike cmark-gfm, a URL after an unmatched ``[`` is
linked too, and ``ftp://`` is not (no ftp links, by policy).
"""

from __future__ import annotations

import re
import unicodedata

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

_TRAILING = frozenset("?!.,:*_~'\"")
_BEFORE_WWW = frozenset(" \t\n\r\f\v*_~(")
_EMAIL_LOCAL = frozenset(".+-_")
_SCHEMES = ("http", "https")
_LETTERS = re.compile(r"[A-Za-z]+$")
_SPACE = re.compile(r"[ \t\n\r\f\v]")
_MAILTO_AFTER_WORD = re.compile(r"[A-Za-z0-9]mailto:$")


def _ascii_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def _hostchar(ch: str) -> bool:
    if ch.isascii():
        return ch.isalnum()
    return not ch.isspace() and not unicodedata.category(ch).startswith("P")


def _valid_domain(text: str, start: int, need_period: bool) -> bool:
    """Whether ``text[start:]`` starts with a valid domain, read as cmark-gfm reads it: from
    its second character to the one before the text's last (so a trailing ``_`` or ``.``
    of the paragraph is not part of it), a backslash skipping the character after it; a
    domain with more than ten periods may have underscores anywhere."""
    end, periods, underscores, underscores_before = start + 1, 0, 0, 0
    while end < len(text) - 1:
        if text[end] == "\\" and end < len(text) - 2:
            end += 1
        ch = text[end]
        if ch == "_":
            underscores += 1
        elif ch == ".":
            underscores_before, underscores = underscores, 0
            periods += 1
        elif ch != "-" and not _hostchar(ch):
            break
        end += 1
    if (underscores or underscores_before) and periods <= 10:
        return False
    return periods > 0 or not need_period


def _trim(text: str, end: int) -> int:
    """The end of the link within ``text[:end]``, after the path validation."""
    less_than = text.find("<", 0, end)
    if less_than >= 0:
        end = less_than
    while end > 0:
        last = text[end - 1]
        if last in _TRAILING:
            end -= 1
        elif last == ";":
            start = end - 2
            while start > 0 and text[start].isascii() and text[start].isalpha():
                start -= 1
            end = start if start < end - 2 and text[start] == "&" else end - 1
        elif last == ")" and text.count(")", 0, end) > text.count("(", 0, end):
            end -= 1
        else:
            break
    return end


def _to_space(text: str, start: int) -> int:
    space = _SPACE.search(text, start)
    return space.start() if space else len(text)


def _link_tokens(md: MarkdownIt, href: str, label: str) -> list[Token]:
    opening = Token("link_open", "a", 1, attrs={"href": md.normalizeLink(href)})
    opening.markup, opening.info = "linkify", "auto"
    text = Token("text", "", 0, content=label)
    closing = Token("link_close", "a", -1, markup="linkify", info="auto")
    return [opening, text, closing]


def _push_link(state: StateInline, href: str, label: str) -> None:
    for token in _link_tokens(state.md, href, label):
        pushed = state.push(token.type, token.tag, token.nesting)
        pushed.attrs, pushed.content = token.attrs, token.content
        pushed.markup, pushed.info = token.markup, token.info


def www_rule(state: StateInline, silent: bool) -> bool:
    src, pos = state.src, state.pos
    # Silent runs (a link label being measured) step over it as text.
    if silent or state.linkLevel > 0 or not src.startswith("www.", pos):
        return False
    if pos > 0 and src[pos - 1] not in _BEFORE_WWW:
        return False
    text = src[pos : state.posMax]
    if not _valid_domain(text, 0, need_period=True):
        return False
    end = _trim(text, _to_space(text, 0))
    _push_link(state, "http://" + text[:end], text[:end])
    state.pos += end
    return True


def url_rule(state: StateInline, silent: bool) -> bool:
    src, pos = state.src, state.pos
    if silent or state.linkLevel > 0 or not src.startswith("://", pos):
        return False
    scheme = _LETTERS.search(state.pending)
    if scheme is None or scheme.group().lower() not in _SCHEMES:
        return False
    start = pos - len(scheme.group())
    if start > 0 and src[start - 1].isascii() and src[start - 1].isalpha():
        return False
    text = src[start : state.posMax]
    after = len(scheme.group()) + 3
    if len(text) <= after or not _hostchar(text[after]):
        return False
    if not _valid_domain(text, after, need_period=False):
        return False
    end = _trim(text, _to_space(text, after))
    if end <= after:
        return False
    state.pending = state.pending[: -len(scheme.group())]
    _push_link(state, text[:end], text[:end])
    state.pos = start + end
    return True


def _email_at(text: str, at: int) -> tuple[int, int, str] | None:
    """The span and href of the email address around the ``@`` at ``text[at]``, if it is
    one (a ``mailto:`` before it belongs to the link)."""
    start = at
    while start > 0 and (_ascii_alnum(text[start - 1]) or text[start - 1] in _EMAIL_LOCAL):
        start -= 1
    if start == at:
        return None
    end, periods = at + 1, 0
    while end < len(text):
        ch = text[end]
        if ch == "@":
            return None
        if ch == "." and end + 1 < len(text) and _ascii_alnum(text[end + 1]):
            periods += 1
        elif not _ascii_alnum(ch) and ch not in "-_":
            break
        end += 1
    last = text[end - 1]
    if end - at < 2 or not periods or not (last == "." or (last.isascii() and last.isalpha())):
        return None
    end = at + _trim(text[at:end], end - at)
    if end <= at + 1:
        return None
    if text.endswith("mailto:", 0, start) and not _MAILTO_AFTER_WORD.search(text, 0, start):
        return start - len("mailto:"), end, text[start - len("mailto:") : end]
    return start, end, "mailto:" + text[start:end]


def _split_emails(md: MarkdownIt, token: Token) -> list[Token] | None:
    text, pieces, done, search = token.content, [], 0, 0
    while (at := text.find("@", search)) >= 0:
        found = _email_at(text, at)
        search = at + 1
        if found is None or found[0] < done:
            continue
        start, end, href = found
        if start > done:
            pieces.append(Token("text", "", 0, content=text[done:start]))
        pieces += _link_tokens(md, href, text[start:end])
        done = search = end
    if not pieces:
        return None
    if done < len(text):
        pieces.append(Token("text", "", 0, content=text[done:]))
    return pieces


def email_rule(state: StateCore) -> None:
    for block in state.tokens:
        if block.type != "inline" or not block.children or "@" not in block.content:
            continue
        children, depth = [], 0
        for token in block.children:
            if token.type == "link_open" or (
                token.type == "html_inline" and re.match(r"<a\b", token.content, re.I)
            ):
                depth += 1
            elif token.type == "link_close" or (
                token.type == "html_inline" and re.match(r"</a\b", token.content, re.I)
            ):
                depth = max(depth - 1, 0)
            elif token.type == "text" and depth == 0 and "@" in token.content:
                pieces = _split_emails(state.md, token)
                if pieces:
                    children += pieces
                    continue
            children.append(token)
        block.children = children


def autolink_plugin(md: MarkdownIt) -> None:
    md.inline.add_terminator_char("w")
    md.inline.ruler.push("gfm_www", www_rule)
    md.inline.ruler.push("gfm_url", url_rule)
    md.core.ruler.push("gfm_email", email_rule)

"""GitHub's extended autolinks (GFM spec, "Autolinks (extension)") for markdown-it.

Bare ``www.example.com``, ``https://example.com/a`` and ``someone@example.com`` become links,
the way cmark-gfm (GitHub's renderer) finds them:

- ``www.`` and ``http://``/``https://`` links are inline rules, so that emphasis never cuts
  a URL in two: ``www.`` at a ``w`` after the start of a line, a space or one of ``*_~(``;
  the scheme at its ``:``, read back from the pending text (any case, not after a letter);
- email addresses are found after inline parsing, in the text outside links (a local part
  such as ``first_last`` is split by emphasis delimiters while inline rules run, and only
  the joined text shows it whole); a ``mailto:`` just before one belongs to its link.

A link needs a valid domain (letters, digits, ``-``, ``_``, with no ``_`` in its last two
segments; a ``www.`` one needs a period), runs to the next space, and then loses trailing
punctuation (``?!.,:*_~'"``), an unbalanced ``)``, an entity-like ``&name;`` and anything
from a ``<``. File names (``app.py``, ``README.md``) stay text: nothing here links a bare
domain without ``www.`` or a scheme. Unlike cmark-gfm, a URL after an unmatched ``[`` is
linked too, and ``ftp://`` is not (no ftp links, by policy).

Every scan is linear in what it reads (model text is untrusted: no quadratic corner).
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
_SCHEME_TAIL = re.compile(r"[A-Za-z]+$")
_SPACE = re.compile(r"[ \t\n\r\f\v]")
_A_OPEN, _A_CLOSE = re.compile(r"<a\b", re.I), re.compile(r"</a\b", re.I)
MAILTO = "mailto:"


def _ascii_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def _hostchar(ch: str) -> bool:
    if ch.isascii():
        return ch.isalnum()
    return not ch.isspace() and not unicodedata.category(ch).startswith("P")


def _valid_domain(src: str, start: int, stop: int, need_period: bool) -> bool:
    """Whether ``src[start:stop]`` starts with a valid domain, read as cmark-gfm reads it:
    from its second character to the one before ``stop``'s (so a trailing ``_`` or ``.``
    of the paragraph is not part of it), a backslash skipping the character after it; a
    domain with more than ten periods may have underscores anywhere."""
    end, periods, underscores, underscores_before = start + 1, 0, 0, 0
    while end < stop - 1:
        if src[end] == "\\" and end < stop - 2:
            end += 1
        ch = src[end]
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


def _link_end(src: str, start: int, stop: int) -> int:
    """Where a link starting at ``src[start]`` ends: at the next space or ``<`` before
    ``stop``, less trailing punctuation, unbalanced ``)`` and an entity-like ``&name;``."""
    space = _SPACE.search(src, start, stop)
    end = space.start() if space else stop
    less_than = src.find("<", start, end)
    if less_than >= 0:
        end = less_than
    opening, closing = src.count("(", start, end), src.count(")", start, end)
    while end > start:
        last = src[end - 1]
        if last in _TRAILING:
            end -= 1
        elif last == ";":
            name = end - 2
            while name > start and src[name].isascii() and src[name].isalpha():
                name -= 1
            end = name if name < end - 2 and src[name] == "&" else end - 1
        elif last == ")" and closing > opening:
            closing -= 1
            end -= 1
        else:
            break
    return end


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
    src, pos, stop = state.src, state.pos, state.posMax
    # Silent runs (a link label being measured) step over it as text.
    if silent or state.linkLevel > 0 or not src.startswith("www.", pos, stop):
        return False
    if pos > 0 and src[pos - 1] not in _BEFORE_WWW:
        return False
    if not _valid_domain(src, pos, stop, need_period=True):
        return False
    end = _link_end(src, pos, stop)
    _push_link(state, "http://" + src[pos:end], src[pos:end])
    state.pos = end
    return True


def url_rule(state: StateInline, silent: bool) -> bool:
    src, pos, stop = state.src, state.pos, state.posMax
    if silent or state.linkLevel > 0 or not src.startswith("://", pos, stop):
        return False
    # The scheme: the letters just before, read from the pending text's end (no longer
    # than "https" and the character before it, so that this stays constant time).
    scheme = _SCHEME_TAIL.search(state.pending[-6:])
    if scheme is None or scheme.group().lower() not in _SCHEMES:
        return False
    start = pos - len(scheme.group())
    if start > 0 and src[start - 1].isascii() and src[start - 1].isalpha():
        return False
    host = pos + 3
    if host >= stop or not _hostchar(src[host]):
        return False
    if not _valid_domain(src, host, stop, need_period=False):
        return False
    end = _link_end(src, start, stop)
    if end <= host:
        return False
    state.pending = state.pending[: -len(scheme.group())]
    _push_link(state, src[start:end], src[start:end])
    state.pos = end
    return True


def _email_at(text: str, at: int) -> tuple[int, int, str] | None:
    """The span and href of the email address around the ``@`` at ``text[at]``, if it is
    one."""
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
    end = _link_end(text, at, end)
    if end <= at + 1:
        return None
    scheme = start - len(MAILTO)
    if text.startswith(MAILTO, scheme, start) and (
        scheme == 0 or not _ascii_alnum(text[scheme - 1])
    ):
        return scheme, end, text[scheme:end]
    return start, end, MAILTO + text[start:end]


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
            html = token.content if token.type == "html_inline" else ""
            if token.type == "link_open" or _A_OPEN.match(html):
                depth += 1
            elif token.type == "link_close" or _A_CLOSE.match(html):
                depth = max(depth - 1, 0)
            elif token.type == "text" and depth == 0 and "@" in token.content:
                pieces = _split_emails(state.md, token)
                if pieces:
                    children += pieces
                    continue
            children.append(token)
        block.children = children


def autolink_plugin(md: MarkdownIt) -> None:
    # markdown-it's text rule runs to the next terminator, where every inline rule is tried.
    # "www." after a space, one of *_~( or the paragraph's start is one here: not each "w"
    # (add_terminator_char), which made ordinary prose a hundred times slower to parse.
    inline = md.inline
    inline.terminator_re = re.compile(rf"{inline.terminator_re.pattern}|(?<![^\s*_~(])www\.")
    md.inline.ruler.push("gfm_www", www_rule)
    md.inline.ruler.push("gfm_url", url_rule)
    md.core.ruler.push("gfm_email", email_rule)

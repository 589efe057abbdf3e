"""Syntax highlighting of a file's text by its name: the Files panel's file view and a
``read`` tool result's card.

The lexer comes from the file name only (``app.py`` → Python; no guessing from the
content); an unknown name, or a text over ``HIGHLIGHT_CAP`` characters, stays plain text
(``None`` here, and the template escapes it). Pygments' ``HtmlFormatter`` escapes the text
it wraps, and its output still goes through the one sanitizing seam (``markdown.sanitize``),
so what a file or a tool says can only ever come out as text inside the
``<div class="codehilite"><pre><code>`` block, with Pygments' token classes on its spans.
"""

from __future__ import annotations

import posixpath
from functools import lru_cache

from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound

from agent.ui.gfm import HIGHLIGHT_WRAPPER
from agent.ui.markdown import RenderCache, sanitize

HIGHLIGHT_CAP = 200_000  # characters; a longer text is shown plain
_formatter = HtmlFormatter(nowrap=True)
_cache = RenderCache(max_chars=8_000_000)


@lru_cache(maxsize=512)
def lexer_for(filename: str) -> Lexer | None:
    """Pygments' lexer for a file name (its last component), or None."""
    name = posixpath.basename(filename.replace("\\", "/"))
    if not name:
        return None
    try:
        lexer = get_lexer_for_filename(name, stripnl=False, stripall=False, ensurenl=False)
    except ClassNotFound:
        return None
    except Exception:  # a lexer whose options or plugin fail: plain text
        return None
    return None if isinstance(lexer, TextLexer) else lexer  # .txt: nothing to highlight


def _key(text: str, filename: str) -> str | None:
    """The cache's key (the lexer, not the name: ``a.py`` and ``b.py`` share), or None when
    nothing is highlighted."""
    if not text or len(text) > HIGHLIGHT_CAP:
        return None
    lexer = lexer_for(filename)
    return None if lexer is None else f"{lexer.name}\x00{text}"


def highlighted(text: str, filename: str) -> str | None:
    """Sanitized HTML of ``text`` highlighted as ``filename``'s type, or None: no lexer for
    that name, or the text is empty or longer than ``HIGHLIGHT_CAP``. Cached: the run's
    writer has a long text highlighted in the render worker first (``render_pool``), off
    its event loop, and finds it here."""
    key = _key(text, filename)
    if key is None:
        return None
    html = _cache.get(key)
    if html is None:
        html = highlight_uncached(text, filename)
        _cache.put(key, html)
    return html


def highlight_uncached(text: str, filename: str) -> str:
    """Highlighting and sanitizing themselves (also what the render worker runs)."""
    body = pygments_highlight(text, lexer_for(filename), _formatter)
    # The renderer's code block around Pygments' output, as a fenced block gets it.
    return sanitize(f'<div class="{HIGHLIGHT_WRAPPER}"><pre><code>{body}</code></pre></div>')


def needs_highlighting(text: str, filename: str) -> bool:
    """Whether ``highlighted`` would do the work now (highlightable and not cached)."""
    key = _key(text, filename)
    return key is not None and _cache.get(key) is None


def remember(text: str, filename: str, html: str) -> None:
    """Cache HTML made elsewhere (the render worker) by ``highlight_uncached``."""
    key = _key(text, filename)
    if key is not None:
        _cache.put(key, html)

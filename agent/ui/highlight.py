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
from agent.ui.markdown import _RenderCache, sanitize

HIGHLIGHT_CAP = 200_000  # characters; a longer text is shown plain
_formatter = HtmlFormatter(nowrap=True)
_cache = _RenderCache(max_chars=8_000_000)


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


def highlighted(text: str, filename: str) -> str | None:
    """Sanitized HTML of ``text`` highlighted as ``filename``'s type, or None: no lexer for
    that name, or the text is empty or longer than ``HIGHLIGHT_CAP``."""
    if not text or len(text) > HIGHLIGHT_CAP:
        return None
    lexer = lexer_for(filename)
    if lexer is None:
        return None
    key = f"{lexer.name}\x00{text}"
    html = _cache.get(key)
    if html is None:
        body = pygments_highlight(text, lexer, _formatter)
        html = sanitize(f'<div class="{HIGHLIGHT_WRAPPER}"><pre><code>{body}</code></pre></div>')
        _cache.put(key, html)
    return html

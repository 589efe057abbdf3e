"""The one sanitizing seam: model text (markdown) → HTML that is safe to put in a page.

``gfm.py`` renders GitHub-flavoured markdown, then nh3 (the Ammonia sanitizer) keeps only an
allowlist: no script, style, iframe, form, input, svg, math, base or meta; no id, on*, hx-*,
data-* or ws-* attributes (so nothing the model writes can drive the page's transport or
scripts); links only to absolute http/https/mailto URLs, with rel="noopener noreferrer
nofollow"; no images at all (a markdown image to another origin is a data-exfiltration
channel; CSP blocks them too); and only the classes the renderer itself emits for
highlighted code (``codehilite`` on its ``div``, Pygments' token classes on ``span``), so
model text cannot dress itself in the page's own classes (a ``help`` overlay drawn as a fake
"session expired" dialog). Everything else the model or a tool produces reaches templates
as text and is escaped there.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from html import escape

import nh3
from pygments.token import STANDARD_TYPES

from agent.ui import gfm

ALLOWED_TAGS = frozenset({
    "p", "br", "hr", "strong", "b", "em", "i", "del", "s", "code", "pre", "kbd", "samp",
    "blockquote", "ul", "ol", "li", "a", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td", "span", "div", "sup", "sub", "dl", "dt", "dd",
})  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "a": ["href", "title"],
    "span": ["class"],  # pygments token classes
    "div": ["class"],  # codehilite wrapper
    "th": ["align"],
    "td": ["align"],
    "ol": ["start"],
}
# Exact class names, per tag: what the renderer and Pygments' HtmlFormatter emit (and
# static/pygments.css styles, under .codehilite only). Never one of the app's own classes
# (tests/ui/test_rendering_classes.py checks every class the app's CSS and templates use).
HIGHLIGHT_WRAPPER = gfm.HIGHLIGHT_WRAPPER
TOKEN_CLASSES = frozenset(name for name in STANDARD_TYPES.values() if name) | {"hll"}
ALLOWED_CLASSES = {"div": frozenset({HIGHLIGHT_WRAPPER}), "span": TOKEN_CLASSES}
ALLOWED_PROTOCOLS = frozenset({"http", "https", "mailto"})
ALIGNMENTS = frozenset({"left", "right", "center"})
LINK_REL = "noopener noreferrer nofollow"
MAX_MARKDOWN = 400_000  # characters rendered as markdown; beyond that, plain text


_URL_NOISE = re.compile(r"[\t\n\r]")
_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*):")
_EDGE = "".join(chr(c) for c in range(0x21))  # C0 controls and space, stripped at the ends


def url_scheme(url: str) -> str | None:
    """The scheme a browser sees (WHATWG URL parsing: tab/newline removed anywhere, controls
    and spaces stripped at the ends); None for a relative URL."""
    match = _SCHEME.match(_URL_NOISE.sub("", url).strip(_EDGE))
    return match.group(1).lower() if match else None


def _attribute_filter(tag: str, name: str, value: str) -> str | None:
    """Called by nh3 for each attribute its allowlist kept: None drops it."""
    if name == "href":
        # Ammonia checks the scheme too (with its own URL parser); this is the browser's
        # reading, and relative links (no target here) go as well.
        return value if url_scheme(value) in ALLOWED_PROTOCOLS else None
    if name == "class":
        names = [n for n in value.split() if n in ALLOWED_CLASSES.get(tag, ())]
        return " ".join(names) or None
    if name == "start":
        return value if value.isdigit() else None
    return value


_cleaner = nh3.Cleaner(
    tags=set(ALLOWED_TAGS),
    attributes={tag: set(names) - {"align", "class"} for tag, names in ALLOWED_ATTRIBUTES.items()},
    tag_attribute_values={"th": {"align": set(ALIGNMENTS)}, "td": {"align": set(ALIGNMENTS)}},
    allowed_classes={tag: set(names) for tag, names in ALLOWED_CLASSES.items()},
    attribute_filter=_attribute_filter,
    url_schemes=set(ALLOWED_PROTOCOLS),
    url_relative="deny",
    strip_comments=True,
    link_rel=None,  # Ammonia would add it to every <a>, with an href or not: see _with_rel
)

# nh3's output is serialized by html5ever: attribute values always in double quotes, with
# '&', '"', '<' and '>' escaped inside them, and no '<' in text: an <a ...> start tag is this.
_LINK_START = re.compile(r"<a( [^>]*)?>")


def _with_rel(match: re.Match) -> str:
    """The sanitizer's link, with the rel and target every link gets (a rewrite of its
    output, not the app's markup)."""
    attributes = match.group(1) or ""
    if ' href="' not in attributes:
        return match.group(0)
    return f'<a{attributes} rel="{LINK_REL}" target="_blank">'


def sanitize(html: str) -> str:
    """The allowlist, then rel and target on every link that kept its href."""
    return _LINK_START.sub(_with_rel, _cleaner.clean(html))


class RenderCache:
    """Recently rendered HTML by what it was rendered from, bounded by their total size.
    Rendering (markdown, code highlighting, sanitizing, a part's template) is most of a
    long conversation's page load, and an answer never changes once complete: the writer
    renders it when the block ends, and page loads and catch-ups of it afterwards reuse
    that. (Also the highlighter's and the transcript parts', agent/ui/part_html.py.)"""

    def __init__(self, max_chars: int):
        self.max_chars, self.chars = max_chars, 0
        self.entries: OrderedDict[str, str] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, text: str) -> str | None:
        with self.lock:
            html = self.entries.get(text)
            if html is not None:
                self.entries.move_to_end(text)
            return html

    def put(self, text: str, html: str) -> None:
        size = len(text) + len(html)
        if size > self.max_chars // 8:
            return  # one huge answer must not flush everything else
        with self.lock:
            if text not in self.entries:
                self.entries[text] = html
                self.chars += size
            while self.chars > self.max_chars:
                old_text, old_html = self.entries.popitem(last=False)
                self.chars -= len(old_text) + len(old_html)


_cache = RenderCache(max_chars=32_000_000)  # ~32 MB for ASCII text at most


def render_markdown(text: str) -> str:
    """Sanitized HTML for untrusted markdown. The only function whose output templates may
    mark safe."""
    if len(text) > MAX_MARKDOWN:
        return f"<pre>{escape(text, quote=False)}</pre>"  # (as the renderer shows code)
    html = _cache.get(text)
    if html is None:
        html = render_uncached(text)
        _cache.put(text, html)
    return html


# Text holding none of markdown's inline marks, no autolink's start, no control character
# and nothing the sanitizer writes as an entity renders as itself: the streaming line is
# rendered on every frame and is mostly such prose (at 100 streaming sessions markdown-it's
# inline pass was a quarter of the server's event loop). tests/ui/test_plain_text.py checks
# the shortcut against the whole pass.
_MARKED = re.compile(
    r"[\\`*_~\[\]!<>&@\x00-\x1f\x7f-\xa0\u2028\u2029\ufeff\ud800-\udfff]|://|www\.", re.I
)
# A line that could open a block other than a paragraph: indented (code), a list item, a
# heading, a quote, a thematic break or setext underline, a table row.
_BLOCK_START = re.compile(r"\s|[-+*#>=|]|\d{1,9}[.)]")


def _plain(text: str) -> bool:
    return not _MARKED.search(text)


def render_uncached(text: str) -> str:
    """The markdown and sanitizer pass itself (also what the render worker runs)."""
    if "\n" not in text and _plain(text) and not _BLOCK_START.match(text) and text.strip():
        return f"<p>{text.strip()}</p>"  # what the renderer makes of one plain paragraph
    return sanitize(gfm.render(text)).strip()


def render_inline(text: str) -> str:
    """Sanitized HTML for a piece of one paragraph's text (the streaming block's line)."""
    if _plain(text):
        return text
    return sanitize(gfm.render_inline(text))


def is_cached(text: str) -> bool:
    return _cache.get(text) is not None


def remember(text: str, html: str) -> None:
    """Cache HTML rendered elsewhere (the render worker) by this very function."""
    _cache.put(text, html)

"""The one sanitizing seam: model text (markdown) → HTML that is safe to put in a page.

python-markdown renders, then bleach keeps only an allowlist: no script, style, iframe,
form, input, svg, math, base or meta; no id, on*, hx-*, data-* or ws-* attributes (so
nothing the model writes can drive htmx or the page's scripts); links only to absolute
http/https/mailto URLs, with rel="noopener noreferrer nofollow"; no images at all (a
markdown image to another origin is a data-exfiltration channel; CSP blocks them too); and
only the classes the renderer itself emits for highlighted code (``codehilite`` on its
``div``, Pygments' token classes on ``span``), so model text cannot dress itself in the
page's own classes (a ``help`` overlay drawn as a fake "session expired" dialog). Everything
else the model or a tool produces reaches templates as text and is escaped there.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from functools import partial

import bleach
import markdown
from bleach.linkifier import LinkifyFilter
from pygments.token import STANDARD_TYPES

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
# Exact class names, per tag: what codehilite and Pygments' HtmlFormatter emit (and
# static/pygments.css styles, under .codehilite only). Never one of the app's own classes
# (tests/ui/test_rendering_classes.py checks every class the app's CSS and templates use).
HIGHLIGHT_WRAPPER = "codehilite"
TOKEN_CLASSES = frozenset(name for name in STANDARD_TYPES.values() if name) | {"hll"}
ALLOWED_CLASSES = {"div": frozenset({HIGHLIGHT_WRAPPER}), "span": TOKEN_CLASSES}
ALLOWED_PROTOCOLS = frozenset({"http", "https", "mailto"})
MAX_MARKDOWN = 400_000  # characters rendered as markdown; beyond that, plain text


_URL_NOISE = re.compile(r"[\t\n\r]")
_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*):")
_EDGE = "".join(chr(c) for c in range(0x21))  # C0 controls and space, stripped at the ends


def url_scheme(url: str) -> str | None:
    """The scheme a browser sees (WHATWG URL parsing: tab/newline removed anywhere, controls
    and spaces stripped at the ends); None for a relative URL."""
    match = _SCHEME.match(_URL_NOISE.sub("", url).strip(_EDGE))
    return match.group(1).lower() if match else None


def _attribute_filter(tag: str, name: str, value: str) -> bool:
    if name not in ALLOWED_ATTRIBUTES.get(tag, ()):
        return False
    if name == "href":
        # bleach's own check passes "javascript:123" (urlparse reads digits as a port), so
        # the scheme is checked here too; relative links have no target here and go as well.
        return url_scheme(value) in ALLOWED_PROTOCOLS
    if name == "class":
        names = value.split()
        return bool(names) and all(n in ALLOWED_CLASSES.get(tag, ()) for n in names)
    if name == "start":
        return value.isdigit()
    if name == "align":
        return value in ("left", "right", "center")
    return True


def _set_link_rel(attrs, new=False):
    href_key = (None, "href")
    if href_key in attrs:
        attrs[(None, "rel")] = "noopener noreferrer nofollow"
        attrs[(None, "target")] = "_blank"
    return attrs


# Bare URLs become links only with an explicit http(s) scheme: file names such as app.py
# or README.md end in real TLDs and must stay text. (bleach's pattern, scheme required.)
URL_RE = re.compile(
    r"""\(*  # any opening parentheses
    \b(?<![@.])(?:https?://)  # the scheme, required
    (?:[\w-]+\.)+[\w-]+(?::[0-9]+)?(?!\.\w)\b  # host(:port)
    (?:[/?][^\s\{\}\|\\\^`<>"]*)?  # path and query""",
    re.IGNORECASE | re.VERBOSE | re.UNICODE,
)

# Linkify inside the cleaner (as a filter): the standalone Linker double-escapes entities
# in the tags it skips, which garbled `->` in code blocks.
_CLEANER_OPTIONS = dict(
    tags=ALLOWED_TAGS,
    attributes=_attribute_filter,
    protocols=ALLOWED_PROTOCOLS,
    strip=True,
    strip_comments=True,
    filters=[
        partial(
            LinkifyFilter,
            callbacks=[_set_link_rel],
            skip_tags={"pre", "code"},
            url_re=URL_RE,
            parse_email=False,
        )
    ],
)


# A Markdown instance and a bleach Cleaner hold parse state and are not thread-safe: the
# event loop, the request thread and database threads each get their own.
_local = threading.local()


def _cleaner() -> bleach.sanitizer.Cleaner:
    cleaner = getattr(_local, "cleaner", None)
    if cleaner is None:
        cleaner = _local.cleaner = bleach.sanitizer.Cleaner(**_CLEANER_OPTIONS)
    return cleaner


def _md() -> markdown.Markdown:
    md = getattr(_local, "md", None)
    if md is None:
        md = _local.md = markdown.Markdown(
            extensions=["fenced_code", "tables", "sane_lists", "codehilite"],
            extension_configs={"codehilite": {"guess_lang": False, "css_class": "codehilite"}},
            output_format="html",
        )
    return md


class _RenderCache:
    """Recently rendered answers, bounded by their total size. Rendering (markdown, code
    highlighting, sanitizing) is most of a long conversation's page load, and an answer
    never changes once complete: the writer renders it when the block ends, and page
    loads and catch-ups of it afterwards reuse that."""

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


_cache = _RenderCache(max_chars=32_000_000)  # ~32 MB for ASCII text at most


def render_markdown(text: str) -> str:
    """Sanitized HTML for untrusted markdown. The only function whose output templates may
    mark safe."""
    if len(text) > MAX_MARKDOWN:
        return f"<pre>{bleach.clean(text, tags=set(), strip=True)}</pre>"
    html = _cache.get(text)
    if html is None:
        html = render_uncached(text)
        _cache.put(text, html)
    return html


def render_uncached(text: str) -> str:
    """The markdown and sanitizer pass itself (also what the render worker runs)."""
    md = _md()
    md.reset()
    return _cleaner().clean(md.convert(text))


def is_cached(text: str) -> bool:
    return _cache.get(text) is not None


def remember(text: str, html: str) -> None:
    """Cache HTML rendered elsewhere (the render worker) by this very function."""
    _cache.put(text, html)

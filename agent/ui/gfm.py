"""GitHub-flavoured markdown → HTML, before sanitizing (``markdown.py`` is the seam).

markdown-it-py's CommonMark parser with GitHub's extensions: tables, strikethrough (``~`` and
``~~``), task lists, extended autolinks (``autolink.py``), footnotes and alerts. Chosen by
measurement against the GFM spec's examples without raw HTML (tests/ui/test_gfm_conformance.py
compares them by structure; renderers alone, 2026-11): markdown-it-py 99.0% of 600 with
this configuration, marko 99.5% but five times slower, cmark-gfm's bindings (cmarkgfm)
97.7% (GitHub's own departures from its spec) and twenty times faster, but with HTML
out and no tokens to shape (highlighting, the policy's substitutions) before it, mistune
88.8%, python-markdown 68.3%.

What the page shows differs from github.com only where the sanitizer's policy says so, and
this renderer already writes it that way:

- code blocks: ``<div class="codehilite"><pre><code>`` with Pygments' token classes when
  the fence names a language Pygments knows (static/pygments.css), plain text otherwise;
- images: their alt text (no images, by policy);
- task list items: a ☐ or ☑ character, not a form control (no ``input``, by policy);
- footnotes: superscript numbers and a numbered list, without the in-page links (no ids
  and no relative links, by policy);
- alerts (``> [!NOTE]``): a blockquote whose first line is the alert's kind, in bold
  (GitHub's coloured boxes are classes, and model text may use none of the page's);
- table alignment: ``align`` rather than a ``style``;
- links: every destination is parsed as a link; which ones keep their ``href`` is the
  sanitizer's decision (absolute http, https and mailto only).
"""

from __future__ import annotations

import threading
from functools import lru_cache
from html import escape

import mdurl
from markdown_it import MarkdownIt
from markdown_it.common.utils import unescapeAll
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from mdit_py_plugins.footnote import footnote_plugin
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from agent.ui.autolink import autolink_plugin

HIGHLIGHT_WRAPPER = "codehilite"
TASK_BOX = {False: "☐ ", True: "☑ "}


@lru_cache(maxsize=256)
def _lexer(language: str) -> Lexer | None:
    """Pygments' lexer for a fence's language, keeping the code's leading and trailing
    newlines (None: unknown, shown as plain text; no guessing)."""
    try:
        return get_lexer_by_name(language, stripnl=False, ensurenl=True)
    except ClassNotFound:
        return None


_formatter = HtmlFormatter(nowrap=True)


# The markup below is the markdown renderer's own output (GitHub's shape for the same
# markdown), produced per token inside markdown-it and sanitized after: not the app's
# markup, so it is not in templates.
def code_block(code: str, language: str = "") -> str:
    lexer = _lexer(language.lower()) if language and code else None
    body = highlight(code, lexer, _formatter) if lexer is not None else escape(code, quote=False)
    return f'<div class="{HIGHLIGHT_WRAPPER}"><pre><code>{body}</code></pre></div>\n'


# -- render rules (methods of markdown-it's renderer: self, tokens, idx, options, env) ---------
def _fence(self, tokens, idx, options, env) -> str:
    token = tokens[idx]
    info = unescapeAll(token.info).strip() if token.info else ""
    return code_block(token.content, info.split(maxsplit=1)[0] if info else "")


def _indented_code(self, tokens, idx, options, env) -> str:
    return code_block(tokens[idx].content)


def _image(self, tokens, idx, options, env) -> str:
    return escape(self.renderInlineAsText(tokens[idx].children or [], options, env), quote=False)


def _cell(self, tokens, idx, options, env) -> str:
    token = tokens[idx]
    style = str(token.attrs.get("style", ""))
    align = style.removeprefix("text-align:") if style.startswith("text-align:") else ""
    return f'<{token.tag} align="{align}">' if align else f"<{token.tag}>"


def _footnote_ref(self, tokens, idx, options, env) -> str:
    return f"<sup>{tokens[idx].meta['id'] + 1}</sup>"


_RULES = {
    "fence": _fence,
    "code_block": _indented_code,
    "image": _image,
    "th_open": _cell,
    "td_open": _cell,
    "s_open": lambda self, tokens, idx, options, env: "<del>",
    "s_close": lambda self, tokens, idx, options, env: "</del>",
    "footnote_ref": _footnote_ref,
    "footnote_block_open": lambda self, tokens, idx, options, env: "<hr>\n<ol>\n",
    "footnote_block_close": lambda self, tokens, idx, options, env: "</ol>\n",
    "footnote_open": lambda self, tokens, idx, options, env: "<li>",
    "footnote_anchor": lambda self, tokens, idx, options, env: "",
    "alert_open": lambda self, tokens, idx, options, env: "<blockquote>\n",
    "alert_close": lambda self, tokens, idx, options, env: "</blockquote>\n",
    "alert_title_open": lambda self, tokens, idx, options, env: "<p><strong>",
    "alert_title_close": lambda self, tokens, idx, options, env: "</strong></p>\n",
}


def _task_boxes(state: StateCore) -> None:
    """A task item's checkbox as a character at the start of its text (inside its first
    paragraph, as GitHub places it, when the item starts with one)."""
    tokens = state.tokens
    for index in range(len(tokens) - 1, -1, -1):
        item = tokens[index]
        if item.type != "list_item_open" or not item.meta or "checked" not in item.meta:
            continue
        box = Token("text", "", 0, content=TASK_BOX[bool(item.meta.pop("checked"))])
        item.attrs.pop("class", None)
        following = tokens[index + 1 : index + 3]
        if [t.type for t in following] == ["paragraph_open", "inline"]:
            following[1].children = [box, *(following[1].children or [])]
        else:
            tokens.insert(index + 1, box)


def _normalize_link(url: str) -> str:
    """Percent-encoded, as GitHub writes hrefs: markdown-it's own also turns host names
    into punycode (a browser makes the same request from either)."""
    return mdurl.encode(url)


def _make() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark",
        {"html": True, "tasklists": True, "alerts": True, "strikethrough_single_tilde": True},
    )
    md.enable(["table", "strikethrough"])
    md.use(autolink_plugin)
    md.use(footnote_plugin, inline=False)
    md.core.ruler.push("task_boxes", _task_boxes)
    for name, rule in _RULES.items():
        md.add_render_rule(name, rule)
    md.validateLink = lambda url: True  # the sanitizer decides, with its own scheme check
    md.normalizeLink = _normalize_link
    return md


# A parser holds rule caches built on first use: each thread gets its own.
_local = threading.local()


def _parser() -> MarkdownIt:
    md = getattr(_local, "md", None)
    if md is None:
        md = _local.md = _make()
    return md


def render(text: str) -> str:
    """HTML for GitHub-flavoured markdown; not safe until sanitized."""
    return _parser().render(text)


def render_inline(text: str) -> str:
    """HTML for the inline markdown of one paragraph's text (no block structure); not safe
    until sanitized."""
    return _parser().renderInline(text)

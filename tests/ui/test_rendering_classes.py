"""Model output cannot wear the app's own classes.

The red team drew a full-screen fake "session expired" dialog from model text by reusing
the page's ``help`` overlay class. Every class name the app uses (its stylesheets, its
templates, its script) is collected here from the files themselves, written into model
markdown and HTML in every way the sanitizer might let through, and must be gone from the
output; only the highlighting classes the renderer itself emits may remain."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agent.ui.markdown import ALLOWED_CLASSES, render_uncached

REPO = Path(__file__).resolve().parents[2]
STATIC = REPO / "static"
TEMPLATES = REPO / "templates"
HIGHLIGHT_CSS = "pygments.css"  # generated: Pygments' styles, every rule under .codehilite

_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_CLASS_SELECTOR = re.compile(r"\.(-?[_a-zA-Z][_a-zA-Z0-9-]*)")
_CLASS_ATTRIBUTE = re.compile(r"""\bclass\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.I)
_TEMPLATE_TAG = re.compile(r"{[{%#].*?[}%#]}", re.S)
_JS_CLASS = re.compile(
    r"""(?:className\s*=|classList\.(?:add|remove|toggle|contains|replace)\()\s*"""
    r"""(["'])([^"']+)\1"""
)


def css_selectors(path: Path) -> list[str]:
    """The selector lists of a stylesheet (the text before each '{', at-rules skipped)."""
    text = _COMMENT.sub("", path.read_text())
    text = re.sub(r"url\([^)]*\)", "", text)
    selectors = []
    for chunk in re.findall(r"([^{}]*){", text):
        chunk = chunk.strip()
        if chunk and not chunk.startswith("@"):
            selectors.extend(s.strip() for s in chunk.split(","))
    return selectors


def css_classes(path: Path) -> set[str]:
    return {name for s in css_selectors(path) for name in _CLASS_SELECTOR.findall(s)}


def template_classes() -> set[str]:
    found = set()
    for path in TEMPLATES.rglob("*.html"):
        for double, single in _CLASS_ATTRIBUTE.findall(path.read_text()):
            # {% if x %}current{% endif %}: the literal words are the classes it can take
            found.update(_TEMPLATE_TAG.sub(" ", double or single).split())
    return found


def script_classes() -> set[str]:
    found = set()
    for path in STATIC.glob("*.js"):
        for _, names in _JS_CLASS.findall(path.read_text()):
            found.update(names.split())
    return found


def app_classes() -> set[str]:
    """Every class the app itself uses: its stylesheets (of the highlighting one, the rules
    that are not scoped to a highlighted block, such as ``span.linenos``), its templates,
    its script."""
    styled = set()
    for path in STATIC.glob("*.css"):
        if path.name != HIGHLIGHT_CSS:
            styled |= css_classes(path)
    for selector in css_selectors(STATIC / HIGHLIGHT_CSS):
        if not selector.startswith(".codehilite"):
            styled.update(_CLASS_SELECTOR.findall(selector))
    return styled | template_classes() | script_classes()


RENDERER_CLASSES = set().union(*ALLOWED_CLASSES.values())
APP_CLASSES = sorted(app_classes())


class Classes(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name == "class":
                self.found.update((value or "").split())


def classes_in(html: str) -> set[str]:
    parser = Classes()
    parser.feed(html)
    return parser.found


def payloads(name: str) -> str:
    """One model answer using ``name`` every way a class could be smuggled in."""
    return "\n\n".join([
        f'<div class="{name}">Session expired. Sign in again.</div>',
        f'<div class="codehilite {name}">boxed</div>',
        f'<span class="{name}">x</span> <span class="k {name}">y</span>',
        f"<span class='{name}'>single quotes</span> <span class={name}>unquoted</span>",
        f'<span class=" {name} ">padded</span> <span class="{name.upper()}">case</span>',
        f'<code class="{name}">x</code> <code class="language-{name}">y</code>',
        f'<p class="{name}">p</p> <a class="{name}" href="https://example.com/">a</a>',
        f'<pre class="{name}"><code class="{name}">pre</code></pre>',
        f'<table class="{name}"><tr class="{name}"><td class="{name}">t</td></tr></table>',
        f"```{name}\ncode in a block named {name}\n```",
        f'<ul class="{name}"><li class="{name}">item</li></ul> <h2 class="{name}">h</h2>',
    ])  # fmt: skip


def test_the_app_class_list_is_collected_from_its_files():
    # The overlay of the attack, the message parts, and a class only the script sets.
    assert {"help", "help-box", "part", "error", "banner", "code-wrap", "copy", "linenos"} <= set(
        APP_CLASSES
    )
    assert len(APP_CLASSES) > 50


def test_the_renderer_allows_none_of_the_apps_own_classes():
    assert RENDERER_CLASSES & set(APP_CLASSES) == set()
    # ... and its own are styled only inside a highlighted block.
    for selector in css_selectors(STATIC / HIGHLIGHT_CSS):
        if set(_CLASS_SELECTOR.findall(selector)) & RENDERER_CLASSES:
            assert selector.startswith(".codehilite"), selector


@pytest.mark.parametrize("name", APP_CLASSES)
def test_no_app_class_survives_in_model_output(name):
    html = render_uncached(payloads(name))
    survived = {c for c in classes_in(html) if c.lower() == name.lower()}
    assert not survived, html
    assert classes_in(html) <= RENDERER_CLASSES, classes_in(html) - RENDERER_CLASSES


def test_highlighted_code_keeps_the_renderers_own_classes():
    html = render_uncached('```python\ndef f(x):\n    return "a"  # c\n```')
    found = classes_in(html)
    assert {"codehilite", "k", "nf", "s2", "c1"} <= found and found <= RENDERER_CLASSES

"""Claude's markdown renders as GitHub renders it: the examples of the GFM spec and of
cmark-gfm's extension tests (../shared/conformance/markdown), through the whole seam
(``render_markdown``: the renderer, then the sanitizer), compared by structure.

Structure is the element tree's tags and text (whitespace collapsed outside ``pre``, and
dropped beside block elements, as cmark's own spec runner normalizes), with no attributes
but ``href``; highlighting spans and the ``codehilite`` wrapper are ignored. Examples
with raw HTML in their markdown are left out (the sanitizer is meant to change those).

The product's policy (agent/ui/markdown.py) is applied to the expected HTML first, since it
is what the product means to show: an ``href`` that is not an absolute http, https or
mailto URL is dropped, a task list's checkbox is the character ☐ or ☑, and an image is its
alt text. Images are nonetheless listed below as expected differences (IMAGES: the page
never shows one), and every other difference is listed with its reason.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import NamedTuple

import pytest
from markdown_it import MarkdownIt

from agent.ui.markdown import ALLOWED_PROTOCOLS, HIGHLIGHT_WRAPPER, render_markdown, url_scheme
from tests.conftest import shared_path

SPEC_TARGET = 0.95

# Examples whose expected HTML shows an image (by number in their file). The product never
# renders one: it shows the alt text, and with that in place of each <img> these match too.
SPEC_IMAGES = frozenset({525, 528, 539, *range(580, 598), 599})
EXTENSION_IMAGES = frozenset({19})

# Spec examples that differ for another reason than raw HTML or images.
SPEC_DIFFERENCES = {
    # The CommonMark "Autolinks" section shows plain text where GitHub's autolink
    # extension (on here, as on github.com; cmark-gfm itself renders these as links too)
    # makes links: bare URLs and addresses, and URLs inside <...> that are not autolinks.
    610: "autolink extension: the URL inside '<http://foo.bar/baz bim>' is linked",
    614: "autolink extension: the address inside '<foo\\+@bar.example.com>' is linked",
    616: "autolink extension: the URL inside '< http://foo.bar >' is linked",
    619: "autolink extension: a bare http:// URL is linked",
    620: "autolink extension: a bare email address is linked",
    # Policy: links only to http, https and mailto URLs.
    628: "ftp:// is not autolinked (policy: no ftp links)",
}
# Extension examples that differ for another reason than raw HTML or images.
EXTENSION_DIFFERENCES = {
    23: "footnotes: superscript numbers and a list, no in-page links (policy: no ids, no "
    "relative links)",
}

FENCE = "`" * 32
BLOCK_TAGS = frozenset({
    "address", "article", "aside", "blockquote", "body", "dd", "details", "dialog", "div",
    "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4",
    "h5", "h6", "header", "hr", "html", "li", "main", "nav", "ol", "p", "pre", "section",
    "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
})  # fmt: skip
VOID_TAGS = frozenset({"br", "hr", "img", "input", "wbr"})


class Example(NamedTuple):
    number: int
    section: str
    markdown: str
    html: str


def examples(*path: str) -> list[Example]:
    """The examples of a spec file, in the format of cmark-gfm's test/spec_tests.py: a
    line of 32 backticks and ``example`` (and an extension's name), the markdown, a line
    holding ".", the HTML, 32 backticks; ``→`` stands for a tab."""
    found, section, lines, state = [], "", [], None
    for line in shared_path(*path).read_text(encoding="utf-8").splitlines(keepends=True):
        bare = line.rstrip("\n")
        if state is None:
            if heading := re.match(r"#{1,6} (.*)", bare):
                section = heading.group(1).strip()
            if bare.startswith(FENCE + " example"):
                state, lines, markdown = "markdown", [], ""
        elif state == "markdown" and bare == ".":
            state, markdown, lines = "html", "".join(lines), []
        elif state == "html" and bare == FENCE:
            html = "".join(lines).replace("→", "\t")
            found.append(Example(len(found) + 1, section, markdown.replace("→", "\t"), html))
            state = None
        else:
            lines.append(line)
    return found


_probe = MarkdownIt("commonmark")  # a plain CommonMark parser, only to find raw HTML


def has_raw_html(markdown: str) -> bool:
    """Whether the markdown holds raw HTML, as CommonMark defines it (an HTML block or an
    inline tag, comment, declaration…; not an autolink, nor a '<' in code)."""
    stack = list(_probe.parse(markdown))
    while stack:
        token = stack.pop()
        if token.type in ("html_block", "html_inline"):
            return True
        stack.extend(token.children or ())
    return False


class _Tree(HTMLParser):
    """HTML → nested [tag, href, children] lists (text as strings)."""

    def __init__(self, policy: bool):
        super().__init__(convert_charrefs=True)
        self.policy = policy
        self.root: list = ["#root", None, []]
        self.open = [self.root]
        self.ignored: list[str] = []  # end tags of the elements left out

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "span" or (tag == "div" and HIGHLIGHT_WRAPPER in classes):
            self.ignored.append(tag)  # highlighting, not structure
            return
        if self.policy and tag == "input" and attrs.get("type") == "checkbox":
            return self.handle_data("☑" if "checked" in attrs else "☐")
        if self.policy and tag == "img":
            return self.handle_data(attrs.get("alt") or "")
        href = attrs.get("href") if tag == "a" else None
        if self.policy and href is not None and url_scheme(href) not in ALLOWED_PROTOCOLS:
            href = None
        node = [tag, href, []]
        self.open[-1][2].append(node)
        if tag not in VOID_TAGS:
            self.open.append(node)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID_TAGS and self.open[-1][0] == tag:
            self.open.pop()

    def handle_endtag(self, tag):
        if self.ignored and self.ignored[-1] == tag and self.open[-1][0] != tag:
            self.ignored.pop()
            return
        for depth in range(len(self.open) - 1, 0, -1):
            if self.open[depth][0] == tag:
                del self.open[depth:]
                return

    def handle_data(self, data):
        children = self.open[-1][2]
        if children and isinstance(children[-1], str):
            children[-1] += data
        else:
            children.append(data)


def _normalized(node: list, in_pre: bool = False) -> tuple:
    tag, href, children = node
    in_pre = in_pre or tag == "pre"
    items: list = []
    for child in children:
        item = child if isinstance(child, str) else _normalized(child, in_pre)
        if isinstance(item, str) and not in_pre:
            item = re.sub(r"\s+", " ", item)
        if isinstance(item, str) and items and isinstance(items[-1], str):
            items[-1] += item
        else:
            items.append(item)
    if not in_pre:
        block = tag in BLOCK_TAGS or tag == "#root"
        kept = []
        for i, item in enumerate(items):
            if isinstance(item, str):
                if (i == 0 and block) or (i > 0 and items[i - 1][0] in BLOCK_TAGS):
                    item = item.lstrip()
                last = i == len(items) - 1
                if (last and block) or (not last and items[i + 1][0] in BLOCK_TAGS):
                    item = item.rstrip()
                if not item:
                    continue
            kept.append(item)
        items = kept
    return (tag, href, tuple(items))


def structure(html: str, policy: bool = False) -> tuple:
    tree = _Tree(policy)
    tree.feed(html)
    tree.close()
    return _normalized(tree.root)


class Outcome(NamedTuple):
    compared: list[int]
    differ: list[int]
    raw_html: list[int]
    images: list[int]  # the examples whose expected HTML has an <img>


def compare(corpus: list[Example]) -> Outcome:
    compared, differ, raw_html, images = [], [], [], []
    for example in corpus:
        if has_raw_html(example.markdown):
            raw_html.append(example.number)
            continue
        html = render_markdown(example.markdown)
        if example.html.strip() == "<IGNORE>":  # only "must not crash"
            continue
        if "<img" in example.html:
            images.append(example.number)
        compared.append(example.number)
        if structure(html) != structure(example.html, policy=True):
            differ.append(example.number)
    return Outcome(compared, differ, raw_html, images)


def report(name: str, outcome: Outcome, capsys, record_property) -> float:
    """Print and record the figures; return the share of examples without images that match."""
    images, differ = set(outcome.images), set(outcome.differ)
    plain = len(outcome.compared) - len(images)
    matched = plain - len(differ - images)
    with_alt_text = len(outcome.compared) - len(differ)
    record_property(f"gfm_{name}_matched", f"{matched}/{plain}")
    with capsys.disabled():
        print(
            f"\nGFM {name}: {matched}/{plain} examples match ({matched / plain:.1%}), "
            f"{matched}/{len(outcome.compared)} with the {len(images)} image examples counted "
            f"as differences ({matched / len(outcome.compared):.1%}), "
            f"{with_alt_text}/{len(outcome.compared)} with alt text in place of images; "
            f"{len(outcome.raw_html)} with raw HTML left out; "
            f"differences: {sorted(differ - images)}"
        )
    return matched / plain


@pytest.fixture(scope="module")
def spec() -> Outcome:
    return compare(examples("conformance", "markdown", "gfm-spec.txt"))


@pytest.fixture(scope="module")
def extensions() -> Outcome:
    return compare(examples("conformance", "markdown", "gfm-extensions.txt"))


def test_the_spec_examples_render_as_github_renders_them(spec, capsys, record_property):
    figure = report("spec", spec, capsys, record_property)
    assert figure >= SPEC_TARGET
    unexplained = set(spec.differ) - set(SPEC_DIFFERENCES) - SPEC_IMAGES
    assert not unexplained, sorted(unexplained)


def test_every_extension_example_renders_as_github_renders_it(extensions, capsys, record_property):
    report("extensions", extensions, capsys, record_property)
    unexplained = set(extensions.differ) - set(EXTENSION_DIFFERENCES) - EXTENSION_IMAGES
    assert not unexplained, sorted(unexplained)


def test_images_are_the_only_expected_differences_listed_as_such(spec, extensions):
    assert set(spec.images) == SPEC_IMAGES
    assert set(extensions.images) == EXTENSION_IMAGES
    # ... and with its alt text in place of each image, every one of them matches.
    assert set(spec.differ) & SPEC_IMAGES == set()
    assert set(extensions.differ) & EXTENSION_IMAGES == set()


def test_the_listed_differences_are_real(spec, extensions):
    """A stale entry (an example that now matches) is removed from the list."""
    assert set(SPEC_DIFFERENCES) <= set(spec.differ)
    assert set(EXTENSION_DIFFERENCES) <= set(extensions.differ)


def test_the_corpus_is_the_one_expected(spec, extensions):
    assert len(spec.compared) + len(spec.raw_html) == 673  # GFM spec 0.29
    assert len(spec.compared) >= 600 and len(extensions.compared) >= 25
    # Each extension is covered outside raw HTML.
    corpus = examples("conformance", "markdown", "gfm-extensions.txt")
    sections = {e.section for e in corpus if e.number in extensions.compared}
    assert {"Tables", "Strikethroughs", "Autolinks", "Task lists", "Footnotes"} <= sections

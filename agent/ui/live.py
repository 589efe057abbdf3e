"""The answer still streaming, shown as markdown at a cost that does not grow with it.

Re-rendering the whole answer on every frame (what the anchors do) costs more per token the
longer the answer gets. Here the live text is cut into markdown blocks as it arrives:

- A **finished block** (one that a blank line and the start of the next block closed, or a
  fenced code block that closed) is rendered once, highlighted and sanitized, and appended.
- The **open block** is re-rendered whole each frame while it is short (``WHOLE_CHARS``).
- A longer open block is shown as its complete lines and the line being written. Its lines
  are rendered together each time they have grown by a quarter (so a block of many lines,
  a long table or list, costs a constant factor of its size in all); the lines in between
  are each rendered once, alone (a table's rows under its header), and appended.
- A long line is cut where no inline construct is left open (no emphasis, code span, link
  or strikethrough that later text could still close), or, with no space for a long way
  (CJK text), anyway; each frozen piece is rendered once and appended, and only the
  unfrozen tail is redone per frame. A line's pieces concatenate to what it renders to.
- An **open fenced code block** grows by appending its escaped new text (it is
  highlighted once, when it closes).

What is on the page is a function of the text alone, never of how the deltas were framed:
a page that caught up from the event log at any seq and the run's renderer, which saw every
frame, hold the same structure, so the run's next frame applies to either. When the block
completes, its ``text`` event replaces all of this with the whole answer rendered at once
(which the pieces already match, apart from the colours of code that was still streaming).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape, unescape

from agent.ui.compiled import render
from agent.ui.markdown import (
    HIGHLIGHT_WRAPPER,
    render_inline,
    render_markdown,
    render_uncached,
)

WHOLE_CHARS = 1_000  # an open block up to this long is re-rendered whole each frame
LINE_BLOCK_CHARS = 500  # a line up to this long is rendered as a block of its own
FREEZE_STEP = 300  # a long line is cut at the first space after each multiple of this...
FORCE_CHARS = 3_000  # ...where nothing is left open, or regardless once this far
SPLIT_LOOKAHEAD = 12  # characters of the line after a blank one that decide the split
HEAD_GROWTH = 1.25  # a long block's lines are re-rendered together each time they grow this much
NO_SPACE_CHARS = 600  # a line with no space this long (CJK, a long token) is cut anyway

_FENCE_OPEN = re.compile(r" {0,3}(`{3,}(?=[^`]*$)|~{3,})")
_LIST_ITEM = re.compile(r" {0,3}([-+*]|\d{1,9}[.)])(\s|$)")
_MAYBE_FENCE_CLOSE = re.compile(r" {0,3}[`~]*")
_CODE_SPAN = re.compile(r"<code>.*?</code>", re.S)
_TAG = re.compile(r"<[^>]*>")
_TABLE_DELIMITER = re.compile(r" {0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*")
_TBODY = re.compile(r"<tbody>(.*)</tbody>", re.S)
_OPENER = re.compile(r"`|[*~](?=\S)|(?<![^\W_])_(?=\S)")


def _nothing_left_open(html: str) -> bool:
    """Whether rendered inline markdown leaves a delimiter that later text could close: a
    backtick, an emphasis or strikethrough opener, a ``[`` or ``<`` with nothing after it
    that closes it. (Closed constructs were turned into tags; code spans are skipped.)"""
    text = unescape(_TAG.sub("", _CODE_SPAN.sub("", html)))
    if _OPENER.search(text):
        return False
    for opener, closer in (("[", "]"), ("<", ">")):
        at = text.rfind(opener)
        if at >= 0 and closer not in text[at:]:
            return False
    return True


@dataclass
class LiveFrame:
    """What changed since the last frame, as the page's swaps need it."""

    finished: list[str] = field(default_factory=list)  # blocks to append to #live-done
    open_html: str | None = None  # the inside of #live-open
    line_html: str | None = None  # the inside of #live-line (a split block's line)
    pending: list[str] = field(default_factory=list)  # lines to append to #live-pending
    frozen: list[str] = field(default_factory=list)  # pieces to append to #live-frozen
    tail_html: str | None = None  # the inside of #live-tail
    code: str = ""  # escaped text to append to #live-code


class LiveMarkdown:
    """One streaming text block: ``feed`` it deltas, take a ``frame`` of changes, or the
    ``html`` of the whole block as it stands."""

    def __init__(self) -> None:
        self.done: list[str] = []  # finished blocks' HTML
        self.chunk = 0  # counts finished blocks: the open block's identity
        self.head = ""  # the open block's complete lines
        self.mark = 0  # how much of ``head`` a long block shows rendered together...
        self.pending: list[str] = []  # ...and its lines after that, each shown alone
        self._pending_html: list[str] = []  # (rendered as they are first shown)
        self.line = ""  # the line being written, after its frozen pieces
        self.line_no = 0  # counts complete lines: the line being written's identity
        self.frozen_text: list[str] = []  # the line's frozen pieces, as text...
        self.frozen_html: list[str] = []  # ...and rendered
        self.frozen_chars = 0  # in those pieces
        self.checked = 0  # cut candidates of ``line`` already found to leave something open
        self.blank = False  # a blank line ended the open block's content so far
        self.has_list = False  # the open block has list items (a blank line may continue it)
        self.fence: tuple[str, int] | None = None  # the open fence's character and length
        self.fence_block = False  # the open block is a fenced code block
        self.code_shown = 0  # characters of that code block's body on the page
        self._sent_key: tuple | None = None  # the open block's structure the page has
        self._sent_whole = ""  # the text whole-block mode last rendered
        self._sent_line = ""
        self._sent_frozen = 0
        self._sent_pending = 0
        self._sent_line_kind = ""
        self._sent_line_no = -1
        self._finished_since: list[str] = []

    # -- reading the text -------------------------------------------------------------
    def feed(self, text: str) -> None:
        while text:
            newline = text.find("\n")
            if newline < 0:
                self.line += text
                break
            line = "".join(self.frozen_text) + self.line + text[: newline + 1]
            text = text[newline + 1 :]
            self.line, self.frozen_text, self.frozen_html, self.checked = "", [], [], 0
            self.frozen_chars = 0
            self.line_no += 1
            self._complete_line(line)
        self._decide_split_early()
        if self.mode == "split" and not self.fence:
            self._freeze()

    def _complete_line(self, line: str) -> None:
        content = line.rstrip("\n")
        if self.fence is not None:
            self._grow(line)
            char, length = self.fence
            stripped = content.strip()
            if (
                len(content) - len(content.lstrip(" ")) <= 3
                and len(stripped) >= length
                and stripped == char * len(stripped)
            ):
                self.fence = None
                if self.fence_block:
                    self._finish()
            return
        if not content.strip():
            if self.head:
                self.blank = True
                self._grow(line)
            return
        if self.blank:
            self.blank = False
            if self._splits_before(content):
                self._finish()
        opener = _FENCE_OPEN.match(content)
        if opener and self.head and not self.has_list and not content[0].isspace():
            self._finish()  # a fence at the margin ends the paragraph before it
        if _LIST_ITEM.match(content):
            self.has_list = True
        if opener:
            self.fence = (opener.group(1)[0], len(opener.group(1)))
            self.fence_block = not self.head
        self._grow(line)

    def _grow(self, line: str) -> None:
        """A complete line joins the open block: rendered with the rest once they have
        grown enough since they last were (or while a fence is open in it), else alone."""
        self.head += line
        if len(self.head) >= HEAD_GROWTH * self.mark or self.fence is not None:
            self.mark, self.pending, self._pending_html = len(self.head), [], []
        else:
            self.pending.append(line)

    def _decide_split_early(self) -> None:
        """After a blank line, the next line's first characters decide whether the open
        block ended: no need to wait for the line to end."""
        line = self.line
        if self.blank and not self.frozen_text and len(line) >= SPLIT_LOOKAHEAD and line.strip():
            self.blank = False
            if self._splits_before(line):
                self._finish()

    def _splits_before(self, line: str) -> bool:
        """A line after a blank one starts a new block unless it is indented (a list
        item's or a code block's continuation) or continues a list."""
        return not line[0].isspace() and not (self.has_list and _LIST_ITEM.match(line))

    def _finish(self) -> None:
        text = self.head.rstrip()
        if text:
            html = render_markdown(text)
            self.done.append(html)
            self._finished_since.append(html)
        self.chunk += 1
        self.head = ""
        self.mark, self.pending, self._pending_html = 0, [], []
        self.blank = self.has_list = self.fence_block = False
        self.fence = None
        self.code_shown = 0

    def _freeze(self) -> None:
        """Cut the long line being written where nothing is left open (see the module's
        docstring); the cuts depend on the line's text alone."""
        if len(self.line) + self.frozen_chars <= LINE_BLOCK_CHARS:
            return
        while True:
            step = self.checked + 1
            at = step * FREEZE_STEP
            if at >= len(self.line):
                return
            space = self.line.find(" ", at, at + NO_SPACE_CHARS)
            if space >= 0:
                cut = space
            elif len(self.line) >= at + NO_SPACE_CHARS:
                cut = at  # a long run without spaces (CJK text, a long token)
            else:
                return
            piece = self.line[:cut]
            html = render_inline(piece)
            if at < FORCE_CHARS and not _nothing_left_open(html):
                self.checked = step
                continue
            self.frozen_text.append(piece)
            self.frozen_html.append(html)
            self.frozen_chars += cut
            self.line = self.line[cut:]
            self.checked = 0

    # -- what the page shows ----------------------------------------------------------
    @property
    def mode(self) -> str:
        if self.fence_block and self.fence is not None:
            return "fence"
        size = len(self.head) + len(self.line) + self.frozen_chars
        return "whole" if size <= WHOLE_CHARS else "split"

    def _line_kind(self) -> str:
        return "pieces" if self.frozen_text or len(self.line) > LINE_BLOCK_CHARS else "block"

    def _key(self) -> tuple:
        mode = self.mode
        if mode == "split":
            return (self.chunk, mode, self.mark)
        return (self.chunk, mode)

    def _code_body(self) -> str:
        """The open fenced block's code as the page shows it: after the fence line, and
        without a last partial line that may yet be the closing fence."""
        body = self.head[self.head.index("\n") + 1 :]
        if not _MAYBE_FENCE_CLOSE.fullmatch(self.line):
            body += self.line
        # A last CR waits for what follows: HTML reads CR LF as one line break, but a CR
        # appended in one frame and its LF in the next as two.
        return body.removesuffix("\r")

    def _open_html(self) -> str:
        mode = self.mode
        if mode == "fence":
            body = self._code_body()
            self.code_shown = len(body)
            context = {"wrapper": HIGHLIGHT_WRAPPER, "code": escape(body, quote=False)}
            return render("agent/live/_code.html", context)
        if mode == "whole":
            self._sent_whole = self.head + "".join(self.frozen_text) + self.line
            return render_uncached(self._sent_whole) if self._sent_whole.strip() else ""
        shown = self.head[: self.mark]
        head = render_uncached(shown) if shown.strip() else ""
        pending = "".join(self._pending_since(0))
        context = {"head": head, "pending": pending, "line": self._line_markup()}
        return render("agent/live/_split.html", context)

    def _pending_since(self, start: int) -> list[str]:
        """The HTML of the lines after ``mark`` from ``start`` on (each rendered once)."""
        while len(self._pending_html) < len(self.pending):
            self._pending_html.append(self._render_alone(self.pending[len(self._pending_html)]))
        self._sent_pending = len(self._pending_html)
        return self._pending_html[start:]

    def _render_alone(self, line: str) -> str:
        """One line of a long block by itself: a table's row under the table's header."""
        lines = self.head.split("\n", 2)
        if len(lines) > 2 and "|" in lines[0] and _TABLE_DELIMITER.fullmatch(lines[1]):
            rows = _TBODY.search(render_uncached(f"{lines[0]}\n{lines[1]}\n{line}"))
            if rows:
                return render("agent/live/_table_row.html", {"rows": rows.group(1)})
        return render_uncached(line) if line.strip() else ""

    def _line_markup(self) -> str:
        """The inside of ``#live-line``: the line as a block of its own, or its frozen
        pieces and its tail."""
        self._sent_line = self.line
        self._sent_frozen = len(self.frozen_html)
        self._sent_line_kind = self._line_kind()
        self._sent_line_no = self.line_no
        if self._line_kind() == "block":
            return render_uncached(self.line) if self.line.strip() else ""
        context = {"frozen": "".join(self.frozen_html), "tail": render_inline(self.line)}
        return render("agent/live/_pieces.html", context)

    def html(self) -> str:
        """The whole block as it stands (a first page, a catch-up): what the frames so far
        built, so later frames apply to it."""
        self._sent_key = self._key()
        self._finished_since = []
        context = {"done": "".join(self.done), "open": self._open_html()}
        return render("agent/live/_block.html", context)

    def frame(self) -> LiveFrame:
        """The changes since the last ``frame`` or ``html``."""
        out = LiveFrame(finished=self._finished_since)
        self._finished_since = []
        key = self._key()
        if key != self._sent_key:
            self._sent_key = key
            out.open_html = self._open_html()
            return out
        mode = self.mode
        if mode == "fence":
            body = self._code_body()
            out.code = escape(body[self.code_shown :], quote=False)
            self.code_shown = len(body)
        elif mode == "whole":
            if self.head + "".join(self.frozen_text) + self.line != self._sent_whole:
                out.open_html = self._open_html()
        else:
            out.pending = self._pending_since(self._sent_pending)
            self._line_changes(out)
        return out

    def _line_changes(self, out: LiveFrame) -> None:
        """The line being written: whole when it is another line or shown another way (or
        short), else its new frozen pieces and its tail."""
        kind = self._line_kind()
        if kind != self._sent_line_kind or self.line_no != self._sent_line_no:
            out.line_html = self._line_markup()
        elif kind == "block":
            if self.line != self._sent_line:
                out.line_html = self._line_markup()
        else:
            out.frozen = self.frozen_html[self._sent_frozen :]
            self._sent_frozen = len(self.frozen_html)
            if self.line != self._sent_line:
                self._sent_line = self.line
                out.tail_html = render_inline(self.line)

    @classmethod
    def of(cls, text: str) -> LiveMarkdown:
        live = cls()
        live.feed(text)
        return live

"""Names shown to people with their bidirectional controls made visible.

A workspace's file names are anyone's to choose (the agent writes them, a prompt injection
steers the agent), and a name holding a bidi control is shown reordered: ``invoice``,
U+202E (right-to-left override), ``fdp.exe`` reads "invoiceexe.pdf". Wherever a workspace
file's name or path, or what a tool printed (a listing, a command, a diff's header), is
shown to a person, each control is written as its code instead
(``invoice⟨U+202E⟩fdp.exe``), so nothing reorders the text around it and the person sees
what is there. Plain text in, plain text out (no markup is added: templates escape it as
any text; ``agent/templatetags/bidi.py`` is the filter they use). Links keep the path as
it is, so that they still reach the file.
"""

from __future__ import annotations

import re

# The embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069), the
# left-to-right and right-to-left marks (U+200E, U+200F) and the Arabic letter mark (U+061C).
BIDI_CONTROLS = frozenset(
    chr(code) for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)
)
_SHOWN = {control: f"⟨U+{ord(control):04X}⟩" for control in BIDI_CONTROLS}
# One search over the text (a tool's output may be 200 KB): most text has none.
_CONTROL = re.compile("[" + "".join(sorted(BIDI_CONTROLS)) + "]")


def bidi_visible(text: str) -> str:
    """``text`` with each bidi control written as ``⟨U+XXXX⟩``."""
    return _CONTROL.sub(lambda found: _SHOWN[found.group()], text)

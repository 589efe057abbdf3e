"""What the run layer tells the layers above it, as Django signals (it imports none of
them): the web layer redraws lists on them (agent/web/revocation.py)."""

from django.dispatch import Signal

# A first prompt named its conversation (``conversation``: the row, its new title set). The
# claim writes the title with ``update()``, which sends no ``post_save``.
conversation_named = Signal()

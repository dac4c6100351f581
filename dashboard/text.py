"""Text shortening for messages and labels (pure: no Django)."""

from __future__ import annotations

ELLIPSIS = "…"


def shorten(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: whole, or cut at the last word boundary that
    fits with an ellipsis (mid-word only when the first word alone is too long)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[: limit - len(ELLIPSIS) + 1]
    cut = head.rfind(" ")
    head = head[:cut] if cut > 0 else head[:-1]
    return head.rstrip(" ,;:.-—") + ELLIPSIS

"""Times and byte counts as people read them (the terminal summary and the HTML report share these)."""

from __future__ import annotations


def fmt_time(seconds: float) -> str:
    """3 significant digits in s, ms, µs ("us" kept ASCII for terminals) or ns."""
    s = float(seconds)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def fmt_bytes(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def fmt_bytes_short(n: int) -> str:
    """Powers of two without decimals: 512 B, 32 KiB, 1 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n:g} GiB"


def fmt_delta_percent(a: float, b: float) -> str:
    """B relative to A: "+12.3%", "-4.0%", "=" when equal, "new"/"gone" when one side is zero."""
    if a == b:
        return "="
    if a == 0:
        return "new"
    if b == 0:
        return "gone"
    return f"{100.0 * (b - a) / a:+.1f}%"

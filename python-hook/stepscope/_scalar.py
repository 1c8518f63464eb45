"""One plain value read from a library that may not have it (a fingerprint's building block).

Its own module so that the fingerprints (_env) and the stack settings (_stack) share it without
importing each other.
"""

from __future__ import annotations

__all__ = ["put"]


def put(env: dict, key: str, get) -> None:
    """Store ``get()`` under ``key`` if it succeeds and is a plain scalar (None is left out)."""
    try:
        value = get()
    except Exception:
        return
    if value is None:
        return
    if isinstance(value, bool):
        env[key] = value
    elif isinstance(value, int):
        env[key] = int(value)
    elif isinstance(value, float):
        env[key] = float(value)
    else:
        env[key] = str(value)

"""Progress bars on stderr, only where a person watches (a terminal): logs and pipes stay clean."""

from __future__ import annotations

from tqdm.auto import tqdm


def bar(iterable=None, enabled: bool = True, **kwargs):
    """tqdm, disabled when `enabled` is False or stderr is not a terminal (tqdm's disable=None)."""
    return tqdm(iterable, disable=None if enabled else True, **kwargs)

"""Keep TVM's native (C++) log lines out of the user's terminal where they are noise."""

from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def silence_native_stderr():
    """Redirect fd 2 to /dev/null for the duration (TVM logs 'Scope Saving/Loaded' per function on save/load)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (embedded interpreters): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)

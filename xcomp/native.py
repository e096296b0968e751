"""Keep TVM's native (C++) log lines out of the user's terminal where they are noise: dropped where they are
always noise, otherwise routed through Python logging (logger `xcomp.tvm`)."""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import os
import re
import subprocess
import sys
import tempfile


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


# A TVM log line: "[HH:MM:SS] file.cc:LINE: Warning: message" (no level word for LOG(INFO)).
_TVM_LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] (?P<site>\S+:\d+): (?:(?P<level>Debug|Warning|Error): )?(?P<text>.*)$")
_LEVELS = {"Debug": logging.DEBUG, "Warning": logging.WARNING, "Error": logging.ERROR, None: logging.INFO}
_active = False  # a capture is on: an inner one (describe inside compile, say) leaves it to the outer

# Runs in a child process so that output written just before a native crash (LLVM's fatal errors exit at once)
# still reaches the terminal: the child reads until every writer is gone, the crashed process included.
_RELAY = r"""
import os, re
tvm = re.compile(rb"\[\d\d:\d\d:\d\d\] \S+:\d+: ")
pending = b""
while True:
    chunk = os.read(0, 65536)
    if not chunk:
        break
    *lines, pending = (pending + chunk).split(b"\n")
    for line in lines:
        os.write(1 if tvm.match(line) else 2, line + b"\n")
    if pending and not pending.startswith(b"["):  # not a TVM line: a progress bar or prompt shows at once
        os.write(2, pending)
        pending = b""
if pending:
    os.write(1 if tvm.match(pending) else 2, pending)
"""


@contextlib.contextmanager
def tvm_log_to_logging(logger=None):
    """Route TVM's C++ log lines (written to fd 2) to the `xcomp.tvm` logger for the duration: each kind once
    with its count, or every line where the logger is enabled for DEBUG (the CLI's -v). Anything else written
    to fd 2 passes through to stderr as it comes. Nested uses are one."""
    global _active
    relay = None
    if not _active:
        relay = _start_relay()
    if relay is None:  # nested, or no real fd 2 to capture (embedded interpreters)
        yield
        return
    process, saved, lines = relay
    python_stderr = sys.stderr
    _active = True
    try:
        if _fileno(python_stderr) == 2:  # Python's own writes (progress bars, logging) skip the relay
            sys.stderr = _direct_stderr(saved, python_stderr)
        yield
    finally:
        _active = False
        gc.collect(1)  # cycles of TVM objects made during the call warn when freed; young ones only, to stay cheap
        sys.stderr = python_stderr
        os.dup2(saved, 2)  # the relay sees the end of its input once child processes holding fd 2 are gone too
        os.close(saved)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # a child process still holds fd 2: the relay serves it till it ends
            pass
        lines.seek(0)
        captured = lines.read().decode("utf-8", "replace").splitlines()
        lines.close()
        _log_tvm_lines(captured, logger or logging.getLogger("xcomp.tvm"))


_direct = None  # (file identity, a text stream on a copy of that file's fd): see _direct_stderr


def _direct_stderr(saved: int, like):
    """A text stream writing to the real stderr (fd `saved`) past the relay. One per stderr file for the process,
    never closed: a logging handler created during a capture (TVM's, on first import) keeps the stream it saw."""
    global _direct
    identity = (os.fstat(saved).st_dev, os.fstat(saved).st_ino)
    if _direct is None or _direct[0] != identity:
        stream = io.TextIOWrapper(io.FileIO(os.dup(saved), "w"), encoding=like.encoding, errors=like.errors,
                                  line_buffering=True, write_through=True)
        _direct = (identity, stream)
    return _direct[1]


def _start_relay():
    """Point fd 2 at a pipe read by the relay process: (process, a copy of the old fd 2, the file that gets TVM's
    lines), or None where that cannot be done."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        return None
    read_end, write_end = os.pipe()
    lines = tempfile.TemporaryFile()
    try:
        process = subprocess.Popen([sys.executable, "-I", "-S", "-c", _RELAY], stdin=read_end, stdout=lines,
                                   stderr=saved)
    except OSError:
        process = None
    os.close(read_end)
    if process is None:
        for fd in (saved, write_end):
            os.close(fd)
        lines.close()
        return None
    os.dup2(write_end, 2)
    os.close(write_end)
    return process, saved, lines


def _fileno(stream):
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by an object without a file (pytest, Jupyter)
        return None


def _log_tvm_lines(captured, logger):
    """Each line where `logger` is enabled for DEBUG, else one record per kind (its text, digits aside)."""
    every = logger.isEnabledFor(logging.DEBUG)
    kinds = {}
    for line in captured:
        m = _TVM_LINE.match(line)
        if m is None:  # the relay's looser test took it for TVM's: shown as it is rather than lost
            logger.warning("%s", line)
            continue
        level = _LEVELS[m["level"]]
        if every:
            logger.log(level, "%s: %s", m["site"], m["text"])
            continue
        kind = kinds.setdefault((level, re.sub(r"\d+", "#", m["text"])), [m["text"], 0])
        kind[1] += 1
    for (level, _), (text, count) in kinds.items():
        more = f" (repeated {count - 1} more times)" if count > 1 else ""
        logger.log(level, "%s%s", text, more)

"""xcomp.native.tvm_log_to_logging: TVM's C++ log lines become log records; other native output passes through."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging, os, sys
from xcomp.native import tvm_log_to_logging
logging.basicConfig(format="%(name)s: %(levelname)s: %(message)s", level=logging.DEBUG if "-v" in sys.argv else None)
with tvm_log_to_logging():
    for i in range(3):
        os.write(2, b"[17:21:30] /src/op.cc:275: Warning: pow(x, %d) may mislead\\n" % (i + 3))
    os.write(2, b"[17:21:30] /src/codegen.cc:9: Unable to detect a version\\n")
    os.write(2, b"a native library's own line\\n")
    if "crash" in sys.argv:
        os.write(2, b"LLVM ERROR: out of registers\\n")
        os._exit(3)
    if "handler" in sys.argv:  # as TVM's meta_schedule logging does on its first import, inside a compile
        late = logging.StreamHandler()
if "handler" in sys.argv:
    late.handleError = lambda record: sys.exit("the handler's stream was closed")
    late.emit(logging.LogRecord("x", logging.WARNING, "f", 1, "made in the capture, still writes", None, None))
"""


def _run(*argv):
    return subprocess.run([sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, timeout=120)


def test_each_kind_once_with_its_count():
    r = _run()
    assert r.returncode == 0
    lines = r.stderr.splitlines()
    assert "a native library's own line" in lines
    assert [line for line in lines if "pow" in line] == ["xcomp.tvm: WARNING: pow(x, 3) may mislead (repeated 2 more "
                                                         "times)"]
    assert not any("detect a version" in line for line in lines)  # TVM's LOG(INFO): a record at INFO


def test_every_line_when_debug_is_on():
    lines = _run("-v").stderr.splitlines()
    assert [line for line in lines if "pow" in line] == [
        f"xcomp.tvm: WARNING: /src/op.cc:275: pow(x, {i}) may mislead" for i in (3, 4, 5)]
    assert "xcomp.tvm: INFO: /src/codegen.cc:9: Unable to detect a version" in lines


def test_output_before_a_native_crash_is_not_lost():
    r = _run("crash")
    assert r.returncode == 3
    assert "a native library's own line" in r.stderr and "LLVM ERROR: out of registers" in r.stderr


def test_a_handler_made_during_a_capture_still_writes_after_it():
    r = _run("handler")
    assert r.returncode == 0, r.stderr
    assert "made in the capture, still writes" in r.stderr


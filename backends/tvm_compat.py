"""Everything xcomp changes in TVM's process-wide state, in one place, applied by `prepare()`.

`get_backend` and `backend_for_spec`, which make every Backend, call `prepare()` first; it does its work once.
- TVM_NUM_THREADS: TVM's thread pool assumes two SMT threads per x86 core and starts one worker per *two*
  hardware threads, so on a 2-core VM without SMT it would run one thread (docs/decisions/thread-count.md). Size
  it by physical cores instead, before the pool first starts; a value the user set still wins.
- TVM_THREAD_POOL_SPIN_COUNT=1000: TVM's workers spin through a thousand yields (about half a millisecond) after a
  parallel region before they sleep, so the next region finds them awake: waking a sleeping one cost 35 us a region
  on a VM, which doubled a small CNN's latency. On a host busier than its cores a spinning worker makes each region
  wait for a time slice; runtime/thread_pool.py then runs the calls on one thread (docs/decisions/thread-count.md).
  A value the user set still wins.
- The ROCm callbacks (rocm/toolchain.py): linking with LLVM 22's ld.lld, and no device bitcode libraries where
  ROCm is not installed. TVM registers its own when tvm.support.rocm is imported; ours override them.

`tensor_intrinsics()` is the one way in to TVM's registered tensor intrinsics: it imports them ten times faster.
"""

from __future__ import annotations

import inspect
import linecache
import os
import sys

SPIN_COUNT = 1000  # yields a pool worker spins through before it sleeps
_prepared = False


def prepare() -> None:
    global _prepared
    if _prepared:
        return
    import tvm.support.rocm  # noqa: F401 - TVM registers its callbacks on import: let it go first, then ours
    import tvm_ffi

    from .cpu.detect import usable_cores
    from .rocm.toolchain import device_bitcode, link_code_object

    os.environ.setdefault("TVM_NUM_THREADS", str(usable_cores()))
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", str(SPIN_COUNT))
    tvm_ffi.register_global_func("tvm_callback_rocm_link", link_code_object, override=True)
    tvm_ffi.register_global_func("tvm_callback_rocm_bitcode_path", device_bitcode, override=True)
    _prepared = True


def tensor_intrinsics():
    """tvm.s_tir.tensor_intrin, imported. It registers TVM's tensor intrinsics (ldmatrix, mma.sync, MFMA, ...) by
    parsing hundreds of TVMScript functions, and each parse takes `inspect.stack()`. For a frame whose file is not
    on disk, such as the `<frozen importlib._bootstrap>` frames an import is full of, inspect scans every module in
    sys.modules to find its source: 25 s to a minute in all. The parser reads only each frame, its line and the
    code on it, which `_stack_without_source_search` gives exactly, in 2.5 s in all
    (docs/decisions/one-time-costs.md)."""
    if "tvm.s_tir.tensor_intrin" not in sys.modules:
        stack, inspect.stack = inspect.stack, _stack_without_source_search
        try:
            import tvm.s_tir.tensor_intrin  # noqa: F401 - registers the intrinsics
        finally:
            inspect.stack = stack
    return sys.modules["tvm.s_tir.tensor_intrin"]


def _stack_without_source_search(context: int = 1) -> list:
    """inspect.stack() from its caller's frame outwards, each code line read through linecache (what inspect
    itself reads for a file on disk; a frame of no file gets no code line, as from inspect)."""
    frame, infos = sys._getframe(1), []
    while frame is not None:
        code = frame.f_code
        line = linecache.getline(code.co_filename, frame.f_lineno, frame.f_globals) if context else ""
        infos.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name,
                                       [line] if line else None, 0 if line else None))
        frame = frame.f_back
    return infos

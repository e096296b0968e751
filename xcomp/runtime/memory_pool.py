"""The Relax VM's pooled allocator, kept from growing without bound when a module's input shapes change.

The pool hands a freed block back only to a request of the same (page-rounded) size and never returns memory to
malloc. A module with symbolic dims called at ever new sizes, as a KV-cache decode step is at each past length,
would hold one block per size for ever (docs/decisions/memory-pool.md)."""

from __future__ import annotations

_clear = None


def release_free_blocks():
    """Give every VM pool's free blocks back to malloc, which can split and merge them for the new sizes. Blocks
    in use (tensors still alive, outputs a caller holds) stay valid."""
    global _clear
    if _clear is None:
        import tvm_ffi

        _clear = tvm_ffi.get_global_func("vm.builtin.memory_manager.clear")
    _clear()

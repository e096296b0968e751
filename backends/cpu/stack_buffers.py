"""Keep a kernel's small buffers on the stack.

TVM's LowerTVMBuiltin gives every CPU buffer of 1 KiB or more a TVMBackendAllocWorkspace / FreeWorkspace pair
where it is allocated: for a register tile that is once per iteration of the parallel loop. A conv's accumulator
tile (28 AVX-512 vectors, 1.8 KiB) thus costs two calls into the runtime's workspace pool, a linear search and a
thread-local lookup for every tile of every conv, ~10,000 per resnet50 inference, a visible share of the model's
time (docs/decisions/stack-buffers.md). Buffers marked `disable_lower_builtin` stay LLVM allocas in the
function's entry block, free to allocate.
"""

from __future__ import annotations

# A buffer this small is a tile (the largest register tile is 32 vectors of 64 bytes); bigger ones, such as a
# padded input or Winograd's transformed tiles, stay in the workspace pool. The budget bounds one function's
# stack frame far below any thread's stack (8 MiB for the pool's workers; Python threads get 8 MiB on Linux).
MAX_STACK_BUFFER = 16 * 1024
STACK_BUDGET = 64 * 1024


def keep_small_buffers_on_stack():
    """A PrimFunc pass to run before LowerTVMBuiltin."""
    from tvm import tirx

    return tirx.transform.prim_func_pass(_mark_function, opt_level=0, name="xcomp.KeepSmallBuffersOnStack")


def _mark_function(func, mod, ctx):  # noqa: ARG001
    import tvm_ffi
    from tvm import tirx

    budget = [STACK_BUDGET]

    def on_alloc(node):
        size = constant_bytes(node.buffer)
        if size is None or size > min(MAX_STACK_BUFFER, budget[0]) or node.buffer.scope() not in ("global", "local"):
            return node
        budget[0] -= size
        return tirx.AllocBuffer(node.buffer, {**dict(node.annotations or {}),
                                              "disable_lower_builtin": tirx.IntImm("int32", 1)})

    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.AllocBuffer, on_alloc)]))


def constant_bytes(buffer) -> int | None:
    """Bytes of a buffer with a constant shape; None for a symbolic one."""
    from tvm import tirx

    elements = 1
    for dim in buffer.shape:
        if not isinstance(dim, tirx.IntImm):
            return None
        elements *= int(dim)
    return elements * buffer.dtype.bits * buffer.dtype.lanes // 8

"""Kernel parameters aligned to their element, not to 64 bytes.

TVM declares every buffer 64-byte aligned, and LLVM then reads a parameter with aligned vector loads, which fault
at any other address. A model's input comes from the caller, and numpy places a large array 16 bytes past a page
boundary, so each call had to copy such an input into an aligned buffer: for a 512x512 MatMul that copy, and the
caches it leaves dirty on one core, cost 12-19% of the call (docs/decisions/call-overhead.md). Declared aligned to
their element, parameters are read with unaligned vector loads, as fast as aligned ones on data that happens to
be aligned, and a caller's array goes to the kernels as it is. Buffers a kernel allocates keep their alignment.
"""

from __future__ import annotations


def params_aligned_to_elements():
    """A PrimFunc pass for the start of the TIR pipeline, where every kernel of a module is in it (those Relax's
    lowering adds too), before any lowering reads the alignment."""
    from tvm import tirx

    return tirx.transform.prim_func_pass(_realign, opt_level=0, name="xcomp.ParamsAlignedToElements")


def _realign(func, mod, ctx):  # noqa: ARG001
    from tvm.tirx import decl_buffer
    from tvm.tirx.buffer import is_buffer_var
    from tvm.tirx.transform.common import BufferReplacer

    replaced = {}
    for param in func.params:
        if not is_buffer_var(param):
            continue
        element = max(1, param.dtype.bits * param.dtype.lanes // 8)  # bool and sub-byte types: 1
        if param.data_alignment > element:
            replaced[param] = decl_buffer(param.shape, param.dtype, param.name, None, param.strides, param.elem_offset,
                                          param.scope(), element, param.offset_factor, layout=param.layout)
    return BufferReplacer(replaced)(func) if replaced else func

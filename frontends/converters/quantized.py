"""QLinearMatMul (TVM's importer has no converter for it)."""

from __future__ import annotations

import numpy as np

from .common import dtype_of, relax_api, static_dim


def convert_qlinear_matmul(bb, inputs, attrs, opset, stock=None):
    """The integer matmul of the zero-point-shifted operands in int32, scaled by a_scale * b_scale / y_scale in
    float32, rounded half to even, shifted by y's zero point and saturated to its type, as the spec's reference
    does. b's scale and zero point may be per column; a's must be per tensor."""
    relax = relax_api()
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = (list(inputs) + [None] * 8)[:8]
    if a_scale.ty.ndim > 0 and static_dim(a_scale, 0, "the size of a_scale", "a per-row scale is not supported") > 1:
        raise NotImplementedError("QLinearMatMul with a per-row scale for a")

    def shifted(x, zero):
        x = relax.op.astype(x, "int32")
        return x if zero is None else relax.op.subtract(x, relax.op.astype(zero, "int32"))

    def as_float(x):
        return relax.op.astype(x, "float32")

    product = bb.normalize(relax.op.matmul(shifted(a, a_zero), shifted(b, b_zero), out_dtype="int32"))
    multiplier = relax.op.divide(relax.op.multiply(as_float(a_scale), as_float(b_scale)), as_float(y_scale))
    scaled = _round_half_to_even(bb, relax.op.multiply(as_float(product), multiplier))
    out_dtype = dtype_of(y_zero) if y_zero is not None else dtype_of(a)
    if y_zero is not None:
        scaled = relax.op.add(scaled, as_float(y_zero))
    info = np.iinfo(out_dtype)
    return relax.op.astype(relax.op.clip(scaled, float(info.min), float(info.max)), out_dtype)


def _round_half_to_even(bb, x):
    """numpy's rint: TVM's round takes halves away from zero. floor(x + 0.5), less one where x + 0.5 was a whole
    odd number (a tie)."""
    relax = relax_api()
    shifted = bb.normalize(relax.op.add(x, relax.const(0.5, "float32")))
    rounded = bb.normalize(relax.op.floor(shifted))
    tie = relax.op.equal(shifted, rounded)
    odd = relax.op.not_equal(relax.op.floor_mod(rounded, relax.const(2.0, "float32")), relax.const(0.0, "float32"))
    return relax.op.where(relax.op.logical_and(tie, odd), relax.op.subtract(rounded, relax.const(1.0, "float32")),
                          rounded)

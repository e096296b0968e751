"""ONNX Resize as one constant interpolation matrix per resized axis.

Resize is separable: resizing axis by axis gives the result of the N-D resize, and along one axis every output
element is a fixed weighted sum of input elements. For a static input shape and constant scales/sizes/roi those
weights are known at import time, so the axis is resized by a matmul with an out x in matrix. This covers what
TVM's resize cannot: a coordinate map by the scale where size x scale is not whole, antialiased downscaling,
keep_aspect_ratio_policy, and outputs of a single row or column under align_corners / tf_crop_and_resize. It
costs in x out multiply-adds per output row instead of a few, so convert_resize uses it only for those cases.

The weights follow the ONNX Resize specification (opset 11..): coordinate transformation, then nearest / linear /
cubic kernels (the last two widened by 1/scale when antialiasing a downscale), neighbours beyond the edge
clamped to it, or dropped with exclude_outside; tf_crop_and_resize's outside points get extrapolation_value.
"""

from __future__ import annotations

import math

import numpy as np

from .common import const_value, relax_api, string_attr

_FLOAT_DTYPES = ("float16", "float32", "float64")


def _source_coordinates(transform, out_size, in_size, scale, roi):
    """x_original for every output index x; and which ones fall outside the input (tf_crop_and_resize)."""
    x = np.arange(out_size, dtype=np.float64)
    outside = np.zeros(out_size, bool)
    if transform == "half_pixel":
        src = (x + 0.5) / scale - 0.5
    elif transform == "pytorch_half_pixel":
        src = (x + 0.5) / scale - 0.5 if out_size > 1 else np.zeros(out_size)
    elif transform == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / (scale * in_size))
        src = offset + (x + 0.5) / scale - 0.5
    elif transform == "asymmetric":
        src = x / scale
    elif transform == "align_corners":
        src = x * (in_size - 1) / (out_size - 1) if out_size > 1 else np.zeros(out_size)
    elif transform == "tf_crop_and_resize":
        start, end = roi
        if out_size > 1:
            src = start * (in_size - 1) + x * (end - start) * (in_size - 1) / (out_size - 1)
        else:
            src = np.full(out_size, (start + end) / 2 * (in_size - 1))
        outside = (src < 0) | (src > in_size - 1)
    else:
        raise NotImplementedError(f"Resize with coordinate_transformation_mode={transform!r}")
    return src, outside


def _kernel(mode, ratio, scale, cubic_a, nearest_mode, antialias):
    """Weights of the neighbours base - n/2 + 1 .. base + n/2 for a source point `ratio` (0 < ratio <= 1) past
    `base`. Antialiasing stretches linear and cubic kernels by 1/scale when shrinking."""
    if mode == "nearest":
        if ratio == 1.0:
            return np.array([0.0, 1.0])
        take_right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": False,
                      "ceil": True}[nearest_mode]
        return np.array([0.0, 1.0]) if take_right else np.array([1.0, 0.0])
    stretch = min(scale, 1.0) if antialias else 1.0
    support = 1 if mode == "linear" else 2
    first = math.floor(-support / stretch) + 1  # taps first .. 1 - first around the point
    distance = np.abs((np.arange(first, 2 - first) - ratio) * stretch)
    if mode == "linear":
        weights = np.clip(1 - distance, 0, 1)
    else:  # Keys' cubic convolution with parameter a
        a = cubic_a
        weights = np.where(distance <= 1, (a + 2) * distance ** 3 - (a + 3) * distance ** 2 + 1,
                           np.where(distance < 2, a * distance ** 3 - 5 * a * distance ** 2 + 8 * a * distance - 4 * a,
                                    0.0))
    return weights / weights.sum()


def interpolation_matrix(in_size, out_size, scale, mode, transform, roi=(0.0, 1.0), cubic_a=-0.75,
                         exclude_outside=False, nearest_mode="round_prefer_floor", antialias=False):
    """(weights [out_size, in_size], outside [out_size]): output row y = weights[y] @ input along the axis, or the
    extrapolation value where outside[y]."""
    src, outside = _source_coordinates(transform, out_size, in_size, scale, roi)
    weights = np.zeros((out_size, in_size))
    for y, x in enumerate(src):
        if outside[y]:
            continue
        base = math.floor(x) if x != math.floor(x) else int(x) - 1  # an exact source pixel is base's right one
        kernel = _kernel(mode, x - base, scale, cubic_a, nearest_mode, antialias)
        neighbours = base - len(kernel) // 2 + 1 + np.arange(len(kernel))
        if exclude_outside and mode != "nearest":
            inside = (neighbours >= 0) & (neighbours < in_size)
            kernel = np.where(inside, kernel, 0.0)
            kernel = kernel / kernel.sum() if kernel.sum() else kernel
        np.add.at(weights[y], np.clip(neighbours, 0, in_size - 1), kernel)
    return weights, outside


def plan(data, inputs, attrs, opset):
    """{axis: (weights, outside)} and the output shape, or None where this way does not apply (a symbolic
    shape, a roi / scales / sizes computed at run time, a non-float tensor, Resize-10)."""
    import tvm

    from .common import dtype_of

    if opset < 11 or dtype_of(data) not in _FLOAT_DTYPES or data.ty.shape is None:
        return None
    dims = data.ty.shape.values
    if not all(isinstance(d, tvm.tirx.IntImm) for d in dims):
        return None
    dims = [int(d) for d in dims]
    rank = len(dims)
    given = [const_value(inputs[i]) if len(inputs) > i and inputs[i] is not None else None for i in (1, 2, 3)]
    for i, value in zip((1, 2, 3), given):
        if len(inputs) > i and inputs[i] is not None and value is None:
            return None  # computed at run time
    roi, scales, sizes = (v if v is not None and v.size else None for v in given)
    axes = [a % rank for a in attrs.get("axes", None) or range(rank)]
    policy = string_attr(attrs, "keep_aspect_ratio_policy", "stretch")
    if scales is not None:
        axis_scales = {a: float(s) for a, s in zip(axes, scales.tolist())}
        # the output size as onnxruntime counts it, in float32
        out = {a: int(np.float32(dims[a]) * np.float32(s)) for a, s in zip(axes, scales.tolist())}
    elif sizes is not None:
        out = {a: int(n) for a, n in zip(axes, sizes.tolist())}
        axis_scales = {a: out[a] / dims[a] for a in axes}
        if policy in ("not_larger", "not_smaller"):
            scale = (min if policy == "not_larger" else max)(axis_scales.values())
            axis_scales = {a: scale for a in axes}
            out = {a: int(scale * dims[a] + 0.5) for a in axes}
    else:
        return None
    transform = string_attr(attrs, "coordinate_transformation_mode", "half_pixel")
    rois = {a: (0.0, 1.0) for a in axes}
    if roi is not None and transform == "tf_crop_and_resize":
        rois = {a: (float(roi[i]), float(roi[len(axes) + i])) for i, a in enumerate(axes)}
    options = dict(mode=string_attr(attrs, "mode", "nearest"), transform=transform,
                   cubic_a=float(attrs.get("cubic_coeff_a", -0.75)),
                   exclude_outside=bool(attrs.get("exclude_outside", 0)),
                   nearest_mode=string_attr(attrs, "nearest_mode", "round_prefer_floor"),
                   antialias=bool(attrs.get("antialias", 0)))
    matrices = {}
    for a in axes:
        if out[a] == dims[a] and axis_scales[a] == 1.0 and rois[a] == (0.0, 1.0):
            continue  # unchanged axis
        if out[a] < 1:
            return None
        matrices[a] = interpolation_matrix(dims[a], out[a], axis_scales[a], roi=rois[a], **options)
    shape = [out.get(a, d) for a, d in enumerate(dims)]
    return matrices, shape


def resize(data, matrices, shape, extrapolation_value):
    """data resized axis by axis with the matrices of `plan`."""
    from .common import dtype_of

    relax = relax_api()
    dtype = dtype_of(data)
    rank = len(shape)
    result = data
    outside = np.zeros([1] * rank, bool)
    for axis, (weights, axis_outside) in matrices.items():
        if axis == rank - 1:
            result = relax.op.matmul(result, relax.const(weights.T.astype(dtype), dtype))
        else:  # the axis as the matmul's row axis, rank - 2, and back
            perm = [d for d in range(rank) if d != axis]
            perm.insert(rank - 2, axis)
            moved = relax.op.permute_dims(result, perm) if perm != list(range(rank)) else result
            result = relax.op.matmul(relax.const(weights.astype(dtype), dtype), moved)
            if perm != list(range(rank)):
                result = relax.op.permute_dims(result, [perm.index(d) for d in range(rank)])
        outside = outside | axis_outside.reshape([-1 if d == axis else 1 for d in range(rank)])
    if outside.any():
        value = relax.const(np.array(extrapolation_value, dtype), dtype)
        result = relax.op.where(relax.const(outside), value, result)
    return result

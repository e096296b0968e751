"""Resize, Upsample, NonMaxSuppression and Col2Im."""

from __future__ import annotations

import numpy as np

from . import separable_resize
from .common import const_value, dim_text, relax_api, string_attr


def convert_resize(bb, inputs, attrs, opset, stock):
    """TVM's Resize where it is right; where it is not (see _tvm_resize), the same Resize as constant
    per-axis interpolation matrices when the shapes and parameters are static, else refused."""
    given = dict(attrs)  # _tvm_resize rewrites attrs for `stock`, which reads them
    try:
        return _tvm_resize(bb, list(inputs), attrs, opset, stock)
    except NotImplementedError as refusal:
        planned = separable_resize.plan(inputs[0], inputs, given, opset)
        if planned is None:
            raise refusal from None
        matrices, shape = planned
        return separable_resize.resize(inputs[0], matrices, shape, float(given.get("extrapolation_value", 0.0)))


def _tvm_resize(bb, inputs, attrs, opset, stock):
    """TVM's Resize, mended or refused where it would be wrong. Output sizes from scales are counted as
    onnxruntime counts them (float32) and handed over as sizes. TVM's resize maps output to input coordinates
    by the ratio of the sizes, ONNX by the scale, and the two differ when size x scale is not whole (a 0.6
    downscale of 4 pixels gives 2, a ratio of 0.5): such a Resize goes through tf_crop_and_resize where it can,
    else it is refused. TVM has no antialias filter and ignores keep_aspect_ratio_policy. Scales or sizes given
    for some axes (opset 18) are spread over every axis."""
    import tvm

    policy = string_attr(attrs, "keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        raise NotImplementedError(f"Resize with keep_aspect_ratio_policy={policy!r}: TVM's resize ignores it")
    if attrs.get("axes") is not None:
        inputs = _resize_on_every_axis(inputs, attrs.pop("axes"))
    scale_input = 1 if opset < 11 else 2
    scales = const_value(inputs[scale_input]) if len(inputs) > scale_input and inputs[scale_input] is not None \
        else None
    _refuse_batch_or_channel_resize(inputs[0], scales, inputs[3] if len(inputs) > 3 else None)
    if len(inputs) > 3 and isinstance(inputs[3], relax_api().ShapeExpr):
        inputs = list(inputs[:3]) + [_sizes_as_constant(inputs[3], inputs[0])] + list(inputs[4:])
    if attrs.get("antialias", 0) and _downsamples(inputs[0], scales, inputs[3] if len(inputs) > 3 else None):
        raise NotImplementedError("Resize with antialias=1 when downsampling: TVM's resize has no antialias filter")
    if opset < 11:  # Resize-10 had neither attribute: asymmetric coordinates, nearest rounded down when upscaling
        attrs["coordinate_transformation_mode"] = b"asymmetric"
        attrs["nearest_mode"] = b"floor" if scales is None or (scales >= 1).all() else b"ceil"
        if scales is not None and (scales > 1).any() and (scales < 1).any():
            raise NotImplementedError("Resize-10 that enlarges one axis and shrinks another")
    transform = string_attr(attrs, "coordinate_transformation_mode", "half_pixel")
    if scales is not None and scales.size:
        shape = inputs[0].ty.shape.values if inputs[0].ty.shape is not None else []
        # None: a symbolic dim. A symbolic batch or channel count (at scale 1, checked above) is fine: TVM's
        # resize reads the spatial sizes only, so its entry below is a placeholder
        dims = [int(d) if isinstance(d, tvm.tirx.IntImm) else None for d in shape]
        if not dims or any(d is None for d in dims[2:]):
            raise NotImplementedError("Resize by scales of an input with symbolic spatial dims")
        # the output size as onnxruntime computes it, in float32: 10 x 0.7f is 7 there, 6 in float64 (TVM's)
        products = [np.float32(d if d is not None else 1) * np.float32(s) for d, s in zip(dims, scales.tolist())]
        sizes = [int(p) for p in products]
    else:
        sizes = const_value(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else None
    # a spatial output of size 1 (after batch and channels): these maps divide by size - 1, a build error even
    # where the division is not used
    if transform in ("align_corners", "tf_crop_and_resize") and sizes is not None and \
            any(int(n) == 1 for n in list(sizes)[2:]):
        raise NotImplementedError(f"Resize ({transform}) to a single row or column: TVM's map divides by zero")
    if scales is None or not scales.size:
        return stock(inputs)
    # sizes instead of scales, counted as onnxruntime counts them, in the opset-11 layout (X, roi, scales,
    # sizes) that TVM's converter reads at every opset (at 10, whose inputs are X and scales, it found no sizes)
    roi = inputs[1] if opset >= 11 else None
    inputs = [inputs[0], roi, None, relax_api().const(np.array(sizes, np.int64), "int64")]
    if transform in ("align_corners", "tf_crop_and_resize") or all(p == n for p, n in zip(products, sizes)):
        return stock(inputs)  # these maps do not involve the scale, or the scale is the ratio of the sizes
    cropped = _as_crop_and_resize(inputs, transform, scales, sizes)
    if cropped is not None:
        attrs["coordinate_transformation_mode"] = b"tf_crop_and_resize"
        return stock(cropped)
    dim, scale, size = next((d, s, n) for d, s, n, p in zip(dims, scales.tolist(), sizes, products) if p != n)
    raise NotImplementedError(
        f"Resize by scale {scale:g} of an axis of size {dim}: the output size {size} is not size x scale, and "
        f"TVM's resize maps coordinates by the size ratio where ONNX uses the scale ({transform}); give the model "
        "sizes instead of scales")


def _refuse_batch_or_channel_resize(data, scales, sizes):
    """TVM's resize changes the spatial axes only (it reads sizes[2:]): a Resize of the batch or channel axis
    came out with the input's size there, a wrong shape. Refused unless those sizes are provably the input's."""
    import tvm
    from tvm.sym import Analyzer

    if scales is not None and scales.size:
        if any(float(s) != 1.0 for s in scales.tolist()[:2]):
            raise NotImplementedError(f"Resize by scales {scales.tolist()}: TVM's resize keeps the batch and "
                                      "channel axes")
        return
    dims = list(data.ty.shape.values) if data.ty.shape is not None else []
    constant = const_value(sizes) if sizes is not None else None
    values = list(sizes.values) if isinstance(sizes, relax_api().ShapeExpr) else \
        (constant.tolist() if constant is not None else None)
    if values is None or len(values) != len(dims):
        return
    for want, have in zip(values[:2], dims[:2]):
        want = tvm.tirx.IntImm("int64", want) if isinstance(want, int) else want
        if not Analyzer().can_prove(tvm.tirx.Cast("int64", want) == tvm.tirx.Cast("int64", have)):
            raise NotImplementedError(f"Resize to sizes whose batch or channel entry ({dim_text(want)}) is not "
                                      f"the input's ({dim_text(have)}): TVM's resize keeps the batch and channel "
                                      "axes")


def _sizes_as_constant(sizes, data):
    """Resize sizes computed from shapes ([batch, C, 2 H, 2 W] of a U-Net's upsampling) as the constant TVM's
    converter reads; it reads the spatial sizes only, so a symbolic batch or channel count becomes a placeholder
    (_refuse_batch_or_channel_resize has proved it the input's own). Symbolic spatial sizes, or a rank other than
    the input's, stay as they are (TVM refuses them)."""
    import tvm

    values = list(sizes.values)
    rank = len(data.ty.shape.values) if data.ty.shape is not None else None
    if rank != len(values) or not all(isinstance(v, tvm.tirx.IntImm) for v in values[2:]):
        return sizes
    placeholders = [int(v) if isinstance(v, tvm.tirx.IntImm) else 1 for v in values]
    return relax_api().const(np.array(placeholders, np.int64), "int64")


def _as_crop_and_resize(inputs, transform, scales, sizes):
    """The Resize as tf_crop_and_resize, whose roi makes any affine map from output to input coordinates:
    x_in = start (W - 1) + x (end - start) (W - 1) / (T - 1), the midpoint of the roi when T = 1. Each ONNX
    transform below is such a map, x_in = slope x + offset, with the scale itself in it. Used only where every
    x_in falls inside the input (tf_crop_and_resize pads outside it, the others clamp), as when downsampling,
    and no spatial output size is 1. None where it does not apply."""
    import tvm

    relax = relax_api()
    dims = [int(d) if isinstance(d, tvm.tirx.IntImm) else None for d in inputs[0].ty.shape.values]
    if len(dims) != len(scales):
        return None
    starts, ends = [], []
    for axis, (dim, scale, size) in enumerate(zip(dims, scales.tolist(), sizes)):
        if dim is None:  # a symbolic batch or channel count at scale 1: the whole axis
            starts.append(0.0)
            ends.append(1.0)
            continue
        slope = 1.0 / scale
        offset = {"asymmetric": 0.0, "half_pixel": 0.5 / scale - 0.5,
                  "pytorch_half_pixel": 0.5 / scale - 0.5 if size > 1 else 0.0,
                  "half_pixel_symmetric": dim / 2 * (1 - size / (scale * dim)) + 0.5 / scale - 0.5}.get(transform)
        if offset is None or size < 1 or (size == 1 and axis >= 2):  # spatial T = 1: TVM divides by T - 1 = 0
            return None
        last = offset + slope * (size - 1)
        if dim == 1:
            if scale != 1:
                return None
            start = end = 0.0
        elif offset < 0 or last > dim - 1:
            return None
        else:
            start = offset / (dim - 1)
            end = start + (slope * (size - 1) / (dim - 1) if size > 1 else 0.0)
        starts.append(start)
        ends.append(end)
    roi = relax.const(np.array(starts + ends, np.float32), "float32")
    return [inputs[0], roi, None, relax.const(np.array(sizes, np.int64), "int64")]


def _resize_on_every_axis(inputs, axes):
    """A Resize's roi / scales / sizes given for `axes` only (opset 18), as TVM reads them: for every axis, the
    others unchanged (roi 0..1, scale 1, their own size)."""
    import tvm

    relax = relax_api()
    data = inputs[0]
    rank = data.ty.ndim
    axes = [a % rank for a in axes]
    dims = data.ty.shape.values if data.ty.shape is not None else []
    full = list(inputs)
    for position, (default, dtype) in {1: (None, "float32"), 2: (1.0, "float32"), 3: (None, "int64")}.items():
        value = const_value(inputs[position]) if len(inputs) > position and inputs[position] is not None else None
        if value is None or not value.size:
            continue
        if position == 1:  # roi: starts then ends
            expanded = np.concatenate([np.zeros(rank), np.ones(rank)])
            expanded[axes] = value[:len(axes)]
            expanded[[rank + a for a in axes]] = value[len(axes):]
        elif position == 2:
            expanded = np.full(rank, default)
            expanded[axes] = value
        else:
            if not all(isinstance(d, tvm.tirx.IntImm) for d in dims):
                raise NotImplementedError("Resize with axes and sizes of an input with symbolic dims")
            expanded = np.array([int(d) for d in dims])
            expanded[axes] = value
        full[position] = relax.const(expanded.astype(value.dtype), str(value.dtype))
    return full


def _downsamples(data, scales, sizes) -> bool:
    """Whether a Resize shrinks some axis (unknown counts as yes)."""
    import tvm

    if scales is not None and scales.size:
        return bool((scales < 1).any())
    sizes = const_value(sizes) if sizes is not None else None
    shape = data.ty.shape.values if data.ty.shape is not None else None
    if sizes is None or shape is None or len(sizes) != len(shape):
        return True
    return any(not isinstance(d, tvm.tirx.IntImm) or int(n) < int(d) for n, d in zip(sizes.tolist(), shape))


def convert_non_max_suppression(bb, inputs, attrs, opset, stock):
    """TVM's converter reads max_output_boxes_per_class, iou_threshold and score_threshold only as constants,
    and quietly takes 0 / 0.5 / none for anything else (no boxes at all came out). Computed ones are refused;
    graph inputs are fixed at compile time (frontends/input_values.py). The IoU threshold is mended below."""
    import tvm

    names = {2: "max_output_boxes_per_class", 3: "iou_threshold", 4: "score_threshold"}
    for position, name in names.items():
        if position < len(inputs) and inputs[position] is not None and \
                not isinstance(inputs[position], tvm.ir.GenericConst):
            raise NotImplementedError(f"NonMaxSuppression with {name} computed in the graph: TVM needs a constant")
    if len(inputs) <= 3 or inputs[3] is None:
        return stock()
    # ONNX suppresses a box whose IoU is above the threshold, TVM at or above: the next float32 up is the same
    # test (a box at exactly the threshold was dropped)
    threshold = np.nextafter(np.float32(const_value(inputs[3]).item()), np.float32(np.inf))
    return stock([*inputs[:3], relax_api().const(threshold, "float32"), *inputs[4:]])


def convert_upsample(bb, inputs, attrs, opset, stock=None):
    """Upsample (deprecated since opset 10, still in older YOLO-era exports) as TVM's 2-D resize: asymmetric
    coordinates, nearest rounding down or linear. TVM's own converter failed at opset 9 and gave wrong numbers
    at opset 7. Whole output sizes of an NCHW input only, its batch and channels unscaled."""
    import tvm

    relax = relax_api()
    data = inputs[0]
    scales = attrs.get("scales") if opset < 9 else (const_value(inputs[1]) if len(inputs) > 1 else None)
    if scales is None:
        raise NotImplementedError("Upsample with scales computed in the graph")
    scales = [float(s) for s in np.asarray(scales).ravel()]
    dims = data.ty.shape.values if data.ty.shape is not None else []
    if len(scales) != 4 or len(dims) != 4 or scales[:2] != [1.0, 1.0]:
        raise NotImplementedError(f"Upsample by {scales} of a rank-{len(dims)} input: only NCHW height and width")
    size = []
    for dim, scale in zip(dims[2:], scales[2:]):
        if not isinstance(dim, tvm.tirx.IntImm) or int(dim) * scale != int(int(dim) * scale):
            raise NotImplementedError(f"Upsample by {scale:g} of an axis of size {dim}: not a whole output size")
        size.append(int(int(dim) * scale))
    mode = string_attr(attrs, "mode", "nearest")
    method = {"nearest": "nearest_neighbor", "linear": "linear", "bilinear": "linear"}.get(mode)
    if method is None:
        raise NotImplementedError(f"Upsample mode {mode!r}")
    return relax.op.image.resize2d(data, size, roi=[0.0, 0.0, 0.0, 0.0], layout="NCHW", method=method,
                                   coordinate_transformation_mode="asymmetric", rounding_method="floor")


def convert_col2im(bb, inputs, attrs, opset, stock):  # noqa: ARG001 - TVM has no converter for it
    """Col2Im: sums sliding blocks back into an image, as one matmul with a constant 0/1 matrix that sends
    (block offset, block position) to its pixel, or nowhere when it falls in the padding. image_shape and
    block_shape must be constants; the input's block-position count must be static."""
    import itertools

    relax = relax_api()
    data = inputs[0]
    image, block = (const_value(inputs[i]) for i in (1, 2))
    if image is None or block is None:
        raise ValueError("Col2Im with image_shape or block_shape computed at run time")
    image, block = [int(v) for v in image], [int(v) for v in block]
    spatial = len(image)
    dilations = list(attrs.get("dilations", [1] * spatial))
    strides = list(attrs.get("strides", [1] * spatial))
    pads = list(attrs.get("pads", [0] * 2 * spatial))
    grid = [(image[d] + pads[d] + pads[spatial + d] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1
            for d in range(spatial)]
    block_size, positions, pixels = int(np.prod(block)), int(np.prod(grid)), int(np.prod(image))
    shape = [int(d) for d in data.ty.shape.values] if data.ty.shape is not None else None
    if shape is None or len(shape) != 3 or shape[1] % block_size or shape[2] != positions:
        raise ValueError(f"Col2Im input of shape {shape}: expected [N, C x {block_size} (the block), {positions} "
                         "(the block positions)]")
    scatter = np.zeros((block_size * positions, pixels), np.float32)
    for b, offset in enumerate(itertools.product(*(range(n) for n in block))):
        for position, at in enumerate(itertools.product(*(range(n) for n in grid))):
            pixel = [at[d] * strides[d] - pads[d] + offset[d] * dilations[d] for d in range(spatial)]
            if all(0 <= pixel[d] < image[d] for d in range(spatial)):
                scatter[b * positions + position, np.ravel_multi_index(pixel, image)] = 1.0
    channels = shape[1] // block_size
    dtype = str(data.ty.dtype)
    flat = relax.op.reshape(data, [shape[0], channels, block_size * positions])
    summed = relax.op.matmul(flat, relax.const(scatter.astype(dtype), dtype))
    return relax.op.reshape(summed, [shape[0], channels, *image])

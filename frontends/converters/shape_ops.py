"""Ops that move or reshape data: Reshape, Slice, Split, Unsqueeze, Expand, CenterCropPad, SequenceInsert; and
ConvTranspose's output_shape, which sets its pads."""

from __future__ import annotations

import numpy as np

from .common import const_value, dim_text, dtype_of, relax_api, static_dim, string_attr


# -- Reshape ----------------------------------------------------------------------------------------------------


def convert_reshape(bb, inputs, attrs, opset, stock):
    """TVM's Reshape, taking a scalar computed from shapes. The importer folds Shape -> Gather/Squeeze -> Mul
    into a primitive value (a symbolic dim such as `batch * heads`); torch's dynamo exporter then reshapes it to
    [1] to concatenate a new shape (nn.MultiheadAttention does), and the stock converter refuses a non-tensor
    input. A reshape to one element stays a shape value, so the shape built from it stays symbolic and the
    Reshape that consumes it static; any other target reshapes the value as an int64 tensor."""
    import tvm

    relax = relax_api()
    data, target = inputs[0], inputs[1]
    if tvm.ir.is_prim_expr(data) and not isinstance(data, relax.Var):
        if dtype_of(data) not in ("int64", "int32"):
            raise NotImplementedError(f"Reshape of a {dtype_of(data)} scalar computed from shapes")
        dim = data if dtype_of(data) == "int64" else tvm.tirx.Cast("int64", data)
        target_value = const_value(target)
        if target_value is not None and target_value.tolist() in ([1], [-1]):
            return relax.ShapeExpr([dim])
        as_tensor = bb.normalize(relax.op.shape_to_tensor(relax.ShapeExpr([dim])))
        return stock([as_tensor] + list(inputs[1:]))
    out = bb.normalize(stock())
    _require_same_size(data, out)
    return out


def _require_same_size(data, out):
    """Refuse a Reshape whose element count is not the input's for every size of its symbolic dims. An exporter
    that traced at one size can leave that size in the target (torch.nn.MultiheadAttention at opsets 14 and 17
    reshapes [seq, batch, 32] to [8, batch * 4, 8]); the VM does not check the count, so other sizes would read
    past the input. Specialized (--input-shape), the mismatch is a clear error at compile time."""
    import tvm
    from tvm.sym import Analyzer

    shapes = [getattr(getattr(v, "ty", None), "shape", None) for v in (data, out)]
    if any(shape is None or not hasattr(shape, "values") for shape in shapes):
        return
    sizes = [tvm.tirx.const(1, "int64") for _ in shapes]
    for n, shape in enumerate(shapes):
        for dim in shape.values:
            sizes[n] = sizes[n] * tvm.tirx.Cast("int64", dim)
    if not Analyzer().can_prove(sizes[0] == sizes[1]):
        raise NotImplementedError(
            f"Reshape of {_dims(shapes[0])} to {_dims(shapes[1])}: the sizes agree only for some values of the "
            "symbolic dims (the exporter left a traced size in the target)")


def _dims(shape) -> str:
    return "[" + ", ".join(dim_text(d) for d in shape.values) + "]"


# -- Slice ------------------------------------------------------------------------------------------------------


def convert_slice(bb, inputs, attrs, opset, stock):
    """Slice before opset 10 takes starts, ends and (optional) axes as attributes; TVM's converter reads them
    from inputs only, so they are handed to it as constant inputs (axes: the first len(starts) axes)."""
    if opset >= 10:
        return stock()
    relax = relax_api()
    # exporters write "to the end" as INT64_MAX; handed over as constants, such bounds came out truncated to
    # 32 bits (INT64_MAX -> -1: one element short), so they are clamped to what int32 holds first
    starts, ends = (np.clip(np.asarray(attrs[name], np.int64), -2**31 + 1, 2**31 - 1) for name in ("starts", "ends"))
    axes = np.asarray(attrs.get("axes", range(len(starts))), np.int64)
    return stock([inputs[0], *(relax.const(v) for v in (starts, ends, axes))])


# -- Split ------------------------------------------------------------------------------------------------------


def convert_split(bb, inputs, attrs, opset, stock):
    """Split into parts some of which are empty: TVM's split wants strictly increasing cut points (an internal
    error), so such a split is one slice per part."""
    relax = relax_api()
    sizes = attrs.get("split") if opset < 13 else (const_value(inputs[1]) if len(inputs) > 1 and
                                                   inputs[1] is not None else None)
    if sizes is None or 0 not in list(np.asarray(sizes).ravel()):
        return stock()
    axis = attrs.get("axis", 0)
    bounds = np.concatenate([[0], np.cumsum(np.asarray(sizes, np.int64))])
    return relax.Tuple([bb.normalize(relax.op.strided_slice(inputs[0], [axis], [int(b)], [int(e)]))
                        for b, e in zip(bounds[:-1], bounds[1:])])


# -- Unsqueeze --------------------------------------------------------------------------------------------------


def convert_unsqueeze(bb, inputs, attrs, opset, stock):
    """Unsqueeze (opset 13+) with a scalar constant `axes`: ONNX's own function bodies write one (AffineGrid's
    unsqueezes with a scalar -1) and onnxruntime takes it, but TVM's converter iterates over it. It gets it as a
    list of one."""
    axes = const_value(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None
    if axes is None or axes.ndim:
        return stock()
    return stock([inputs[0], relax_api().const(axes.reshape(1))])


# -- CenterCropPad ----------------------------------------------------------------------------------------------


def convert_center_crop_pad(bb, inputs, attrs, opset, stock=None):
    """CenterCropPad (opset 18; TVM has no converter): per axis, a centred slice where the target is smaller
    (an odd surplus leaves the extra element at the end) and centred zero padding where it is larger."""
    from tvm import topi

    relax = relax_api()
    data, target = inputs[0], const_value(inputs[1])
    if target is None:
        raise NotImplementedError("CenterCropPad with a shape computed in the graph")
    rank = data.ty.ndim
    dims = [static_dim(data, axis, f"axis {axis} of CenterCropPad's input", "the crop and pad are planned from it")
            for axis in range(rank)]
    axes = [a % rank for a in (attrs.get("axes") or range(rank))]
    begin, end, before, after = [0] * rank, list(dims), [0] * rank, [0] * rank
    for axis, size in zip(axes, target.tolist()):
        if size < dims[axis]:
            begin[axis] = (dims[axis] - size) // 2
            end[axis] = begin[axis] + size
        else:
            before[axis] = (size - dims[axis]) // 2
            after[axis] = size - dims[axis] - before[axis]
    cropped = bb.normalize(relax.op.strided_slice(data, list(range(rank)), begin, end))
    if not any(before) and not any(after):
        return cropped
    return bb.emit_te(topi.nn.pad, cropped, before, after, 0.0)


# -- SequenceInsert ---------------------------------------------------------------------------------------------


def convert_sequence_insert(bb, inputs, attrs, opset, stock):
    """ONNX takes a negative position as position + length (-1 inserts before the last tensor); TVM's converter
    added one more and appended instead. A negative constant position is made non-negative first."""
    position = const_value(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else None
    if position is None or int(position) >= 0:
        return stock()
    length = len(inputs[0].fields) if isinstance(inputs[0], relax_api().Tuple) else None
    if length is None:
        raise NotImplementedError("SequenceInsert at a negative position into a sequence of unknown length")
    return stock([inputs[0], inputs[1], relax_api().const(int(position) + length, "int64")])


# -- Expand -----------------------------------------------------------------------------------------------------


def convert_expand(bb, inputs, attrs, opset, stock):
    """TVM's Expand, with a run-time shape tensor made to broadcast as ONNX says. TVM broadcasts to that shape as
    given, so a 1 where the input has 3 gave a size-1 axis: wrong numbers. ONNX keeps the input's size there, so
    the shape handed over is where(shape == 1, input shape, shape), right-aligned with the input's rank."""
    import tvm

    relax = relax_api()
    data, shape = inputs[0], inputs[1]
    target = const_value(shape) if isinstance(shape, tvm.ir.GenericConst) else None
    if target is not None and data.ty.shape is not None and \
            not all(isinstance(d, tvm.tirx.IntImm) for d in data.ty.shape.values):
        return _expand_symbolic_to_constant(data, target.astype(np.int64).tolist())
    if isinstance(shape, (relax.ShapeExpr, tvm.ir.GenericConst)) or shape.ty.shape is None or \
            data.ty.shape is None or not isinstance(shape.ty.shape.values[0], tvm.tirx.IntImm):
        return stock()  # constant and shape-expression targets: TVM's converter applies the rule itself
    length = int(shape.ty.shape.values[0])
    dims = list(data.ty.shape.values)
    rank = max(length, len(dims))
    input_dims = bb.normalize(relax.op.shape_to_tensor(relax.ShapeExpr([1] * (rank - len(dims)) + dims)))
    target = bb.normalize(relax.op.astype(shape, "int64"))
    if length < rank:
        target = bb.normalize(relax.op.concat([relax.const(np.ones(rank - length, np.int64), "int64"), target]))
    ones = relax.const(1, "int64")
    return stock([data, bb.normalize(relax.op.where(relax.op.equal(target, ones), input_dims, target))])


def _expand_symbolic_to_constant(data, target):
    """Expand of an input with symbolic dims to a constant shape (TVM's converter reads every input dim as a
    number). Right-aligned, each output dim is the input's where the target says 1, else the target's."""
    import tvm

    relax = relax_api()
    dims = list(data.ty.shape.values)
    rank = max(len(dims), len(target))
    dims = [tvm.tirx.IntImm("int64", 1)] * (rank - len(dims)) + dims
    target = [1] * (rank - len(target)) + target
    out = []
    for want, have in zip(target, dims):
        static = int(have) if isinstance(have, tvm.tirx.IntImm) else None
        if want == 1:
            out.append(have)
        elif static in (None, 1, want):  # a symbolic dim must be 1 or `want` at run time: broadcast_to checks
            out.append(tvm.tirx.IntImm("int64", want))
        else:
            raise ValueError(f"Expand: an input dim of {static} cannot broadcast to {want}")
    return relax.op.broadcast_to(data, relax.ShapeExpr(out))


def convert_conv_transpose(bb, inputs, attrs, opset, stock):
    """TVM's ConvTranspose ignores output_shape (a 10-wide output came out 11 wide). With it, the spec derives
    the pads: total = stride (in - 1) + output_padding + (kernel - 1) dilation + 1 - out, split evenly with the
    odd one at the start (at the end for SAME_UPPER); the pads are handed over and output_shape dropped."""
    output_shape = attrs.pop("output_shape", None)
    if not output_shape:
        return stock()
    data = inputs[0]
    spatial = data.ty.ndim - 2
    output_shape = list(output_shape)[-spatial:]  # (it may include batch and channels)
    dims = [static_dim(data, 2 + i, f"ConvTranspose input axis {2 + i}", "output_shape sets the pads from it")
            for i in range(spatial)]
    kernel = list(attrs.get("kernel_shape") or
                  [static_dim(inputs[1], 2 + i, "ConvTranspose kernel axis", "the pads are computed from it")
                   for i in range(spatial)])
    strides = list(attrs.get("strides", [1] * spatial))
    dilations = list(attrs.get("dilations", [1] * spatial))
    output_padding = list(attrs.get("output_padding", [0] * spatial))
    upper = string_attr(attrs, "auto_pad", "NOTSET") == "SAME_UPPER"
    attrs.pop("auto_pad", None)
    begin, end = [], []
    for i in range(spatial):
        total = strides[i] * (dims[i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1 - output_shape[i]
        if total < 0:  # an output larger than the full one: the rows past it, at the end, take no input
            if output_padding[i] - total >= strides[i]:
                raise NotImplementedError(f"ConvTranspose output_shape {output_shape} is more than a stride larger "
                                          "than the full output")
            output_padding[i] -= total
            total = 0
        small, large = total // 2, total - total // 2
        begin.append(small if upper else large)
        end.append(large if upper else small)
    attrs["pads"] = begin + end
    attrs["output_padding"] = output_padding
    return stock()


# -- Range --------------------------------------------------------------------------------------------------------


def convert_range(bb, inputs, attrs, opset, stock):  # noqa: ARG001
    """TVM's Range, except for integer bounds computed from shapes and a constant step, such as a decoder's
    position ids range(past, past + seq): TVM's converter names the length anew, so the ids stop matching the
    sequence dim they are added to, and everything after has no static shape. The length here is the bounds'
    own difference, simplified: (past + seq) - past = seq."""
    import tvm

    relax = relax_api()
    start, limit, delta = inputs
    dtype = dtype_of(start) if not tvm.ir.is_prim_expr(start) else None
    if opset >= 27 and dtype in ("float16", "bfloat16"):  # stash_type: counted in float32 (or float64)
        stash = {1: "float32", 11: "float64"}.get(attrs.get("stash_type", 1))
        if stash is None:
            raise ValueError(f"stash_type {attrs['stash_type']} is not FLOAT (1) or DOUBLE (11)")
        wide = [bb.normalize(relax.op.astype(x, stash)) for x in inputs]
        return relax.op.astype(convert_range(bb, wide, attrs, 11, lambda _=None: stock(wide)), dtype)
    step = const_value(delta)
    bounds = [start if tvm.ir.is_prim_expr(start) else const_value(start),
              limit if tvm.ir.is_prim_expr(limit) else const_value(limit)]
    if (step is None or step.size != 1 or not np.issubdtype(step.dtype, np.integer) or int(step) == 0
            or any(b is None for b in bounds) or not any(tvm.ir.is_prim_expr(b) for b in bounds)):
        return stock()
    dtype, step = str(step.dtype), int(step)
    first, end = (_int64(b) if tvm.ir.is_prim_expr(b) else tvm.tirx.const(int(b), "int64") for b in bounds)
    # ceil(span / stride) with a positive divisor: TVM lowers a floordiv by a negative constant badly
    span, stride = (end - first, step) if step > 0 else (first - end, -step)
    length = _non_negative(tvm.tirx.floordiv(span + (stride - 1), stride))
    return relax.op.arange(first, first + length * step, step, dtype)


def _int64(expr):
    """`expr` as int64, the dtype of shape dims, unchanged where it already is."""
    import tvm

    return expr if str(expr.ty) == "int64" else tvm.tirx.Cast("int64", expr)


def _non_negative(length):
    """max(length, 0), simplified knowing that the shape vars in it are sizes (so `seq` stays `seq`)."""
    import tvm
    from tvm.sym import Analyzer, ConstIntBound

    analyzer = Analyzer()
    for var in tvm.tirx.analysis.undefined_vars(length):
        analyzer.update(var, ConstIntBound(0, ConstIntBound.POS_INF))
    return analyzer.simplify(tvm.tirx.max(length, 0))


def convert_space_to_depth(bb, inputs, attrs, opset, stock):
    """SpaceToDepth; opset 28 added `mode`: CRD orders each block's values channel first (TVM's converter has
    DCR, the order before)."""
    mode = string_attr(attrs, "mode", "DCR")
    if mode == "DCR":
        return stock()
    if mode != "CRD":
        raise ValueError(f"mode {mode!r} is not DCR or CRD")
    relax = relax_api()
    block = int(attrs["blocksize"])
    if inputs[0].ty.ndim != 4:
        raise ValueError(f"SpaceToDepth takes a 4D input, got rank {inputs[0].ty.ndim}")
    b, c, h, w = inputs[0].ty.shape.values
    x = relax.op.reshape(inputs[0], (b, c, h // block, block, w // block, block))
    x = relax.op.permute_dims(x, [0, 1, 3, 5, 2, 4])
    return relax.op.reshape(x, (b, c * block * block, h // block, w // block))


def convert_reverse_sequence(bb, inputs, attrs, opset, stock=None):
    """ReverseSequence (TVM has no converter): along time_axis, batch b's first sequence_lens[b] elements
    reversed, the rest kept; a gather whose index for each (time, batch) is len - 1 - t below len, else t."""
    relax = relax_api()
    data, lengths = inputs[0], inputs[1]
    batch_axis, time_axis = attrs.get("batch_axis", 1), attrs.get("time_axis", 0)
    rank = data.ty.ndim
    if sorted((batch_axis, time_axis)) != [0, 1] or rank < 2:
        raise ValueError(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 of a rank >= 2 input")
    steps = static_dim(data, time_axis, "the time axis", "the reversal indexes along it")
    shape = [1] * rank
    shape[time_axis] = steps
    time = relax.op.reshape(bb.normalize(relax.op.arange(0, steps, dtype="int64")), shape)
    shape = [1] * rank
    shape[batch_axis] = -1
    length = bb.normalize(relax.op.reshape(bb.normalize(relax.op.astype(lengths, "int64")), shape))
    reversed_index = relax.op.subtract(relax.op.subtract(length, relax.const(1, "int64")), time)
    index = relax.op.where(relax.op.less(time, length), reversed_index, time)
    index = relax.op.clip(index, 0, steps - 1)  # a length beyond the time axis stays in bounds
    index = bb.normalize(relax.op.broadcast_to(index, data.ty.shape))
    return relax.op.gather_elements(data, index, axis=time_axis)


def convert_eye_like(bb, inputs, attrs, opset, stock=None):
    """EyeLike: ones on the k-th diagonal of a matrix of the input's shape, in `dtype` (the input's type when
    unset; TVM's converter refused any other)."""
    import onnx

    relax = relax_api()
    data = inputs[0]
    if data.ty.ndim != 2:
        raise ValueError(f"EyeLike takes a 2D input, got rank {data.ty.ndim}")
    dtype = dtype_of(data)
    if attrs.get("dtype") is not None:
        dtype = str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(attrs["dtype"])))
    rows, columns = data.ty.shape.values
    row = relax.op.reshape(bb.normalize(relax.op.arange(0, rows, dtype="int64")), [-1, 1])
    column = bb.normalize(relax.op.arange(0, columns, dtype="int64"))
    diagonal = relax.op.equal(relax.op.add(row, relax.const(attrs.get("k", 0), "int64")), column)
    return relax.op.where(diagonal, relax.const(1, dtype), relax.const(0, dtype))

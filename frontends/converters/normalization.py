"""LayerNormalization, BatchNormalization and LpNormalization."""

from __future__ import annotations

from .common import dtype_of, relax_api


def convert_layer_norm(bb, inputs, attrs, opset, stock):
    """TVM's LayerNormalization computes Y only: its Mean and InvStdDev outputs are scalar zeros. When the node
    asks for them, they are computed here in the stash type (float32), over the normalized axes, kept as size-1
    dims as the spec says; Y stays TVM's fused layer_norm."""
    relax = relax_api()
    result = stock()
    context = attrs.get("tvm_custom", {}).get("xcomp")
    rank = inputs[0].ty.ndim
    wanted = context is None or any(context.node.output[1:])  # (None: inside an If branch, node unknown)
    if not wanted or rank < 0 or not isinstance(result, relax.Tuple):
        return result
    data = inputs[0] if dtype_of(inputs[0]) == "float32" else relax.op.astype(inputs[0], "float32")
    mean, _centered, variance = _moments(bb, data, list(range(attrs.get("axis", -1) % rank, rank)))
    epsilon = relax.const(attrs.get("epsilon", 1e-5), "float32")
    return relax.Tuple([result.fields[0], mean, relax.op.rsqrt(relax.op.add(variance, epsilon))])


def convert_batch_norm(bb, inputs, attrs, opset, stock):
    """training_mode=1 normalizes with the batch's own statistics and outputs updated running ones. TVM's
    converter passes the flag on, but DecomposeOpsForInference then uses the running statistics: wrong numbers.
    That mode is computed here; inference stays TVM's (folded into the conv before it)."""
    if not attrs.get("training_mode", 0):
        return stock()
    relax = relax_api()
    data, scale, bias, running_mean, running_var = inputs[:5]
    rank = data.ty.ndim
    if rank < 2:
        raise NotImplementedError("BatchNormalization training_mode=1 of an input of unknown rank")
    per_channel = [1, -1] + [1] * (rank - 2)
    mean, centered, variance = _moments(bb, data, [0, *range(2, rank)])
    dtype = dtype_of(data)
    epsilon, momentum = (relax.const(attrs.get(k, d), dtype) for k, d in (("epsilon", 1e-5), ("momentum", 0.9)))
    normalized = relax.op.multiply(centered, relax.op.rsqrt(relax.op.add(variance, epsilon)))
    y = relax.op.add(relax.op.multiply(normalized, relax.op.reshape(scale, per_channel)),
                     relax.op.reshape(bias, per_channel))
    keep = relax.op.subtract(relax.const(1, dtype), momentum)

    def updated(running, current):
        return relax.op.add(relax.op.multiply(running, momentum),
                            relax.op.multiply(relax.op.reshape(current, [-1]), keep))

    return relax.Tuple([y, updated(running_mean, mean), updated(running_var, variance)])


def _moments(bb, data, axes):
    """(mean, data - mean, population variance) over `axes`, the reduced axes kept as size 1."""
    relax = relax_api()
    mean = bb.normalize(relax.op.mean(data, axes, keepdims=True))
    centered = bb.normalize(relax.op.subtract(data, mean))
    return mean, centered, bb.normalize(relax.op.mean(relax.op.multiply(centered, centered), axes, keepdims=True))


def convert_lp_normalization(bb, inputs, attrs, opset, stock):  # noqa: ARG001 - TVM has no converter for it
    """x / ||x||_p along `axis` (p 1 or 2); where the norm is 0 (so is x), 0, as onnxruntime and the spec's
    reference give."""
    relax = relax_api()
    data = inputs[0]
    p, axis = attrs.get("p", 2), attrs.get("axis", -1)
    if p == 1:
        norm = relax.op.sum(relax.op.abs(data), axis=[axis], keepdims=True)
    elif p == 2:
        norm = relax.op.sqrt(relax.op.sum(relax.op.multiply(data, data), axis=[axis], keepdims=True))
    else:
        raise ValueError(f"LpNormalization with p={p}: the spec allows 1 and 2")
    zero = relax.const(0, dtype_of(data))
    return relax.op.where(relax.op.equal(norm, zero), zero, relax.op.divide(data, norm))


def convert_rms_norm(bb, inputs, attrs, opset, stock):
    """RMSNormalization (opset 23): TVM's fused rms_norm, except over every axis (axis 0), where its kernel
    reads the scale with the wrong rank and fails to build: x / sqrt(mean(x^2) + epsilon) * scale, in float32
    for 16-bit inputs (the stash type)."""
    relax = relax_api()
    data, scale = inputs[0], inputs[1]
    rank = data.ty.ndim
    axis = attrs.get("axis", -1)
    if rank < 0 or not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is outside the input's rank {rank}")
    if axis % rank != 0:
        return stock()
    dtype = dtype_of(data)
    compute = "float32" if dtype in ("float16", "bfloat16") else dtype
    x = data if compute == dtype else relax.op.astype(data, compute)
    w = scale if dtype_of(scale) == compute else relax.op.astype(scale, compute)
    mean = relax.op.mean(relax.op.multiply(x, x), axis=list(range(rank)), keepdims=True)
    epsilon = relax.const(attrs.get("epsilon", 1e-5), compute)
    result = relax.op.multiply(relax.op.multiply(x, relax.op.rsqrt(relax.op.add(mean, epsilon))), w)
    return result if compute == dtype else relax.op.astype(result, dtype)

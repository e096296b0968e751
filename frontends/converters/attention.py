"""The language-model ops of opsets 23+: Attention, RotaryEmbedding, TensorScatter (a KV-cache write).

TVM's importer maps "Attention" to com.microsoft's contrib op (packed QKV weights, a different signature), so the
ONNX op is converted here, following the spec and onnx's reference implementation step by step: Q and K scaled
by sqrt(scale) each, softcap before the mask, a bias built from the mask, the causal frontier, the sliding
window and the padding, softmax in softmax_precision, and rows whose keys are all masked giving zeros.
"""

from __future__ import annotations

import numpy as np

from .common import dtype_of, relax_api, string_attr

_QK_RAW, _QK_SOFTCAP, _QK_BIAS, _QK_SOFTMAX = 0, 1, 2, 3
# softmax_precision values (TensorProto data types) the spec allows
_SOFTMAX_DTYPES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}


def _input(inputs, index):
    return inputs[index] if len(inputs) > index else None


def _dims(expr, what):
    if expr.ty.shape is None or not hasattr(expr.ty.shape, "values"):
        raise NotImplementedError(f"{what} has no known shape")
    return list(expr.ty.shape.values)


def _static(dim, what) -> int:
    import tvm

    if not isinstance(dim, tvm.tirx.IntImm):
        raise NotImplementedError(f"{what} is {dim}, not a static number")
    return int(dim)


def _proved_equal(a, b) -> bool:
    from tvm.sym import Analyzer

    return bool(Analyzer().can_prove(a == b))


def _split_heads(bb, x, heads):
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    relax = relax_api()
    batch, seq, _hidden = _dims(x, "a 3D Attention input")
    x = bb.normalize(relax.op.reshape(x, [batch, seq, heads, -1]))
    return bb.normalize(relax.op.permute_dims(x, [0, 2, 1, 3]))


def _additive(bb, mask, dtype):
    """A bool mask (True: attend) as 0 / -inf in `dtype`; a float mask as it is, in `dtype`."""
    relax = relax_api()
    if dtype_of(mask) == "bool":
        return bb.normalize(relax.op.where(mask, relax.const(0, dtype), relax.const(-np.inf, dtype)))
    return mask if dtype_of(mask) == dtype else bb.normalize(relax.op.astype(mask, dtype))


def _pad_mask(bb, mask, total):
    """The mask's last dim padded to `total` keys with -inf (False for a bool mask), as the spec says."""
    relax = relax_api()
    dims = _dims(mask, "attn_mask")
    if _proved_equal(dims[-1], total):
        return mask
    width = _static(total, "the key count") - _static(dims[-1], "attn_mask's last dim")
    if width < 0:
        raise ValueError(f"attn_mask has {int(dims[-1])} keys, more than the {int(total)} of K and past_key")
    dtype = dtype_of(mask)
    fill = relax.const(False if dtype == "bool" else -np.inf, dtype)
    padding = relax.op.broadcast_to(fill, dims[:-1] + [width])
    return bb.normalize(relax.op.concat([mask, padding], axis=-1))


def _frontier(bb, q_len, offset, nonpad):
    """Each query's absolute position as an int64 tensor: (q, 1) for a scalar offset (the past length, or 0),
    (batch, q, 1) for the external cache, where query i of batch b sits at nonpad[b] - q_len + i."""
    relax = relax_api()
    if nonpad is None:
        return bb.normalize(relax.op.reshape(bb.normalize(relax.op.arange(offset, offset + q_len, dtype="int64")),
                                             [-1, 1]))
    rows = bb.normalize(relax.op.reshape(bb.normalize(relax.op.arange(-q_len, 0, dtype="int64")), [1, -1, 1]))
    return bb.normalize(relax.op.add(rows, relax.op.reshape(nonpad, [-1, 1, 1])))


def _as_bias(bb, allowed, dtype):
    """A bool `allowed` of shape (q, kv) or (batch, q, kv) as 0 / -inf, ranked to broadcast with (batch, heads,
    q, kv) scores."""
    relax = relax_api()
    bias = bb.normalize(relax.op.where(allowed, relax.const(0, dtype), relax.const(-np.inf, dtype)))
    if bias.ty.ndim == 3:
        bias = bb.normalize(relax.op.expand_dims(bias, [1]))
    return bias


def convert_attention(bb, inputs, attrs, opset, stock=None):
    """ONNX Attention (opsets 23, 24 and 25)."""
    relax = relax_api()
    query, key, value = inputs[0], inputs[1], inputs[2]
    mask, past_key, past_value = _input(inputs, 3), _input(inputs, 4), _input(inputs, 5)
    nonpad = _input(inputs, 6)
    if (past_key is None) != (past_value is None):
        raise ValueError("past_key and past_value must be given together")
    if nonpad is not None and past_key is not None:
        raise ValueError("nonpad_kv_seqlen cannot be combined with past_key / past_value")
    dtype = dtype_of(query)
    if dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise NotImplementedError(f"Attention on {dtype}")
    rank = query.ty.ndim
    if rank == 3:
        q_heads, kv_heads = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
        if not q_heads or not kv_heads:
            raise ValueError("3D Q, K and V need the q_num_heads and kv_num_heads attributes")
        query = _split_heads(bb, query, q_heads)
        key = _split_heads(bb, key, kv_heads)
        value = _split_heads(bb, value, kv_heads)
    elif rank != 4:
        raise NotImplementedError(f"Q of rank {rank}: Attention takes 3D or 4D Q, K and V")

    q_dims = _dims(query, "Q")
    q_len, head_size = q_dims[2], _static(q_dims[3], "Q's head size")
    scale = attrs.get("scale")
    scale = 1 / np.sqrt(head_size) if scale is None else scale
    if past_key is not None:
        key = bb.normalize(relax.op.concat([past_key, key], axis=2))
        value = bb.normalize(relax.op.concat([past_value, value], axis=2))
    present_key, present_value = key, value
    total = _dims(key, "K")[2]
    past_len = _dims(past_key, "past_key")[2] if past_key is not None else 0
    q_heads, kv_heads = _static(q_dims[1], "Q's head count"), _static(_dims(key, "K")[1], "K's head count")
    if q_heads != kv_heads:
        if q_heads % kv_heads:
            raise ValueError(f"{q_heads} query heads do not group over {kv_heads} key/value heads")
        key = bb.normalize(relax.op.repeat(key, q_heads // kv_heads, axis=1))
        value = bb.normalize(relax.op.repeat(value, q_heads // kv_heads, axis=1))
    # 16-bit floats are computed in float32, as onnxruntime does: their rounding at each step is what the
    # tolerance of the reference outputs cannot absorb
    compute = "float32" if dtype in ("float16", "bfloat16") else dtype
    if compute != dtype:
        query, key, value = (bb.normalize(relax.op.astype(x, compute)) for x in (query, key, value))
    # sqrt(scale) in the inputs' type, as the spec's function body rounds it
    root = relax.const(np.array(np.sqrt(scale)).astype(_numpy_dtype(dtype)).astype(compute), compute)

    # the additive bias: mask, causal frontier, sliding window, padding (None when nothing is masked)
    bias = None
    if mask is not None:
        bias = _additive(bb, _pad_mask(bb, mask, total), compute)
    left, right = attrs.get("left_window_size", -1), attrs.get("right_window_size", -1)
    causal = bool(attrs.get("is_causal", 0))
    if causal or left >= 0 or right >= 0:
        position = _frontier(bb, q_len, past_len, nonpad)
        keys = bb.normalize(relax.op.arange(0, total, dtype="int64"))
        conditions = []
        if causal:
            conditions.append(relax.op.less_equal(keys, position))
        if left >= 0:  # position - key <= left
            conditions.append(relax.op.less_equal(relax.op.subtract(position, keys), relax.const(left, "int64")))
        if right >= 0:  # key - position <= right
            conditions.append(relax.op.less_equal(relax.op.subtract(keys, position), relax.const(right, "int64")))
        allowed = conditions[0]
        for condition in conditions[1:]:
            allowed = relax.op.logical_and(allowed, condition)
        frontier = _as_bias(bb, bb.normalize(allowed), compute)
        bias = frontier if bias is None else bb.normalize(relax.op.add(bias, frontier))
    if nonpad is not None:
        keys = bb.normalize(relax.op.arange(0, total, dtype="int64"))
        valid = relax.op.less(keys, relax.op.reshape(nonpad, [-1, 1, 1, 1]))
        padding = bb.normalize(relax.op.where(valid, relax.const(0, compute), relax.const(-np.inf, compute)))
        bias = padding if bias is None else bb.normalize(relax.op.add(bias, padding))

    scores = bb.normalize(relax.op.matmul(relax.op.multiply(query, root),
                                          relax.op.permute_dims(relax.op.multiply(key, root), [0, 1, 3, 2])))
    raw = scores
    softcap = attrs.get("softcap", 0.0)
    if softcap and softcap > 0:
        cap = relax.const(softcap, compute)
        scores = bb.normalize(relax.op.multiply(relax.op.tanh(relax.op.divide(scores, cap)), cap))
    capped = scores
    if bias is not None:
        scores = bb.normalize(relax.op.add(scores, bias))
    precision = attrs.get("softmax_precision")
    if precision is not None and precision not in _SOFTMAX_DTYPES:
        raise ValueError(f"softmax_precision {precision} is not one the spec allows")
    softmax_dtype = _SOFTMAX_DTYPES.get(precision, compute)
    logits = scores if softmax_dtype == compute else relax.op.astype(scores, softmax_dtype)
    probabilities = bb.normalize(relax.op.nn.softmax(logits, axis=-1))
    if bias is not None:  # a row with every key masked has no attendable key: zeros, not NaN
        # (counted, not max(bias) == -inf: TVM's max starts from the lowest finite value, not -inf)
        infinite = relax.op.astype(relax.op.isinf(bias), "int32")
        masked = relax.op.greater(relax.op.min(infinite, axis=-1, keepdims=True), relax.const(0, "int32"))
        probabilities = bb.normalize(relax.op.where(masked, relax.const(0, softmax_dtype), probabilities))
    if softmax_dtype != compute:
        probabilities = bb.normalize(relax.op.astype(probabilities, compute))
    output = bb.normalize(relax.op.matmul(probabilities, value))
    if rank == 3:
        batch, _heads, seq, _size = _dims(output, "Y")
        output = bb.normalize(relax.op.permute_dims(output, [0, 2, 1, 3]))
        output = bb.normalize(relax.op.reshape(output, [batch, seq, -1]))

    mode = attrs.get("qk_matmul_output_mode", _QK_RAW)
    qk_output = {_QK_RAW: raw, _QK_SOFTCAP: capped, _QK_BIAS: scores, _QK_SOFTMAX: probabilities}.get(mode)
    if qk_output is None:
        raise ValueError(f"qk_matmul_output_mode {mode} is not one of 0..3")
    if compute != dtype:
        output, qk_output = (bb.normalize(relax.op.astype(x, dtype)) for x in (output, qk_output))
    return relax.Tuple([output, present_key, present_value, qk_output])


def _numpy_dtype(dtype):
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, dtype, dtype))


def convert_rotary_embedding(bb, inputs, attrs, opset, stock=None):
    """RotaryEmbedding (opset 23): the first rotary_embedding_dim features of each head rotated by the cached
    cos / sin at each token's position, as halves or (interleaved) as even / odd pairs."""
    relax = relax_api()
    data, cos, sin = inputs[0], inputs[1], inputs[2]
    positions = _input(inputs, 3)
    rank = data.ty.ndim
    if rank == 4:  # (batch, heads, seq, size) -> (batch, seq, heads, size)
        x = bb.normalize(relax.op.permute_dims(data, [0, 2, 1, 3]))
    elif rank == 3:
        heads = attrs.get("num_heads", 0)
        if not heads:
            raise ValueError("a 3D input needs the num_heads attribute")
        batch, seq, _hidden = _dims(data, "X")
        x = bb.normalize(relax.op.reshape(data, [batch, seq, heads, -1]))
    else:
        raise NotImplementedError(f"X of rank {rank}: RotaryEmbedding takes 3D or 4D input")
    head_size = _static(_dims(x, "X")[3], "the head size")
    rotary = attrs.get("rotary_embedding_dim", 0) or head_size
    if rotary % 2 or rotary > head_size:
        raise ValueError(f"rotary_embedding_dim {rotary} must be even and at most the head size {head_size}")
    half = rotary // 2
    if positions is not None:  # (positions, half) caches indexed by (batch, seq) positions
        cos = bb.normalize(relax.op.take(cos, positions, axis=0, mode="clip"))
        sin = bb.normalize(relax.op.take(sin, positions, axis=0, mode="clip"))
    if _static(_dims(cos, "cos_cache")[-1], "cos_cache's last dim") != half:
        raise ValueError(f"cos_cache's last dim is {int(_dims(cos, 'cos_cache')[-1])}, not rotary dim / 2 = {half}")
    cos = bb.normalize(relax.op.expand_dims(cos, [2]))  # (batch, seq, 1, half)
    sin = bb.normalize(relax.op.expand_dims(sin, [2]))
    rotate = x if rotary == head_size else \
        bb.normalize(relax.op.strided_slice(x, axes=[3], begin=[0], end=[rotary]))
    interleaved = bool(attrs.get("interleaved", 0))
    if interleaved:
        x1 = relax.op.strided_slice(rotate, axes=[3], begin=[0], end=[rotary], strides=[2])
        x2 = relax.op.strided_slice(rotate, axes=[3], begin=[1], end=[rotary], strides=[2])
    else:
        x1 = relax.op.strided_slice(rotate, axes=[3], begin=[0], end=[half])
        x2 = relax.op.strided_slice(rotate, axes=[3], begin=[half], end=[rotary])
    x1, x2 = bb.normalize(x1), bb.normalize(x2)
    real = relax.op.subtract(relax.op.multiply(cos, x1), relax.op.multiply(sin, x2))
    imag = relax.op.add(relax.op.multiply(sin, x1), relax.op.multiply(cos, x2))
    if interleaved:  # (..., half, 2) -> (..., rotary): real and imaginary parts alternate again
        pairs = bb.normalize(relax.op.stack([real, imag], axis=4))
        rotated = relax.op.reshape(pairs, _dims(rotate, "X"))
    else:
        rotated = relax.op.concat([real, imag], axis=3)
    rotated = bb.normalize(rotated)
    if rotary != head_size:
        rest = relax.op.strided_slice(x, axes=[3], begin=[rotary], end=[head_size])
        rotated = bb.normalize(relax.op.concat([rotated, rest], axis=3))
    if rank == 4:
        return relax.op.permute_dims(rotated, [0, 2, 1, 3])
    return relax.op.reshape(rotated, _dims(data, "X"))


def convert_tensor_scatter(bb, inputs, attrs, opset, stock=None):
    """TensorScatter (opset 24): the update written into the cache along `axis` from each batch's write index
    (0 without write_indices); `circular` wraps around the cache. Each cache position takes the update row
    that lands on it, if any: a gather and a select, so no write can fall outside the cache."""
    relax = relax_api()
    cache, update = inputs[0], inputs[1]
    indices = _input(inputs, 2)
    mode = string_attr(attrs, "mode", "linear")
    if mode not in ("linear", "circular"):
        raise ValueError(f"mode {mode!r} is not linear or circular")
    rank = cache.ty.ndim
    axis = attrs.get("axis", -2)
    axis = axis + rank if axis < 0 else axis
    if not 0 < axis < rank:
        raise ValueError(f"axis {attrs.get('axis', -2)} is the batch axis or outside rank {rank}")
    target = _dims(cache, "past_cache")
    length = _static(target[axis], "the cache's sequence length")
    steps = _static(_dims(update, "update")[axis], "the update's sequence length")
    shape = [1] * rank
    shape[axis] = length
    row = relax.op.reshape(bb.normalize(relax.op.arange(0, length, dtype="int64")), shape)  # each slot's position
    if indices is not None:  # minus its batch's write index: the update row that lands on it
        row = relax.op.subtract(row, relax.op.reshape(indices, [-1] + [1] * (rank - 1)))
    if mode == "circular":
        row = relax.op.floor_mod(row, relax.const(length, "int64"))
    row = bb.normalize(row)
    written = bb.normalize(relax.op.logical_and(relax.op.greater_equal(row, relax.const(0, "int64")),
                                                relax.op.less(row, relax.const(steps, "int64"))))
    row = relax.op.broadcast_to(relax.op.clip(row, 0, max(steps - 1, 0)), target)
    gathered = bb.normalize(relax.op.gather_elements(update, row, axis=axis))
    return relax.op.where(relax.op.broadcast_to(written, target), gathered, cache)


def convert_causal_conv_with_state(bb, inputs, attrs, opset, stock=None):
    """CausalConvWithState (opset 27): a depthwise conv1d over the input left-padded with the carried state
    (zeros without one), an optional SiLU, and the last k - 1 positions of the padded input as the new state."""
    relax = relax_api()
    data, weight = inputs[0], inputs[1]
    bias, past = _input(inputs, 2), _input(inputs, 3)
    activation = string_attr(attrs, "activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise ValueError(f"activation {activation!r} is not none, silu or swish")
    if data.ty.ndim != 3 or weight.ty.ndim != 3:
        raise ValueError("input and weight must be rank 3: (batch, channels, length) and (channels, 1, k)")
    batch, channels, length = _dims(data, "input")
    kernel = _static(_dims(weight, "weight")[2], "the kernel size")
    if kernel < 1:
        raise ValueError(f"kernel size {kernel}")
    if past is None:
        past = relax.op.broadcast_to(relax.const(0, dtype_of(data)), [batch, channels, kernel - 1])
    padded = bb.normalize(relax.op.concat([past, data], axis=2))
    output = bb.normalize(relax.op.nn.conv1d(padded, weight, groups=_static(channels, "the channel count")))
    if bias is not None:
        output = bb.normalize(relax.op.add(output, relax.op.reshape(bias, [-1, 1])))
    if activation != "none":  # in float32 for 16-bit floats, as the spec's reference computes it
        dtype = dtype_of(output)
        narrow = dtype in ("float16", "bfloat16")
        wide = bb.normalize(relax.op.astype(output, "float32")) if narrow else output
        output = bb.normalize(relax.op.multiply(wide, relax.op.sigmoid(wide)))
        output = bb.normalize(relax.op.astype(output, dtype)) if narrow else output
    total = _dims(padded, "the padded input")[2]
    state = relax.op.strided_slice(padded, axes=[2], begin=[total - (kernel - 1)], end=[total])
    return relax.Tuple([output, bb.normalize(state)])

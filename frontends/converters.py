"""Our own ONNX op converters, for ops TVM's Relax importer lacks or gets wrong.

`CONVERTERS` maps an ONNX op type (default domain) to `convert(bb, inputs, attrs, opset, stock) -> relax.Expr`,
with the importer's calling convention: `inputs` is the node's inputs as Relax expressions (None for an omitted
optional input; constants for initializers), `attrs` its attributes as TVM parses them (strings as bytes), and
`stock(inputs=None)` runs TVM's own converter for the node (for fixes that amend its inputs or its result).
The importer (frontends/onnx.py) asks this table first, so an entry here also overrides TVM's converter.
A converter raises ValueError / NotImplementedError for a node it cannot take; the importer turns that into an
UnsupportedOpError naming the node and op. `attrs["tvm_custom"]["xcomp"]` is a NodeContext: the ONNX node
being converted, and a way to make the module check a condition at run time.

Recurrent ops (LSTM, GRU, RNN) have no converter in TVM 0.27. Ours unrolls the recurrence over the sequence:
the input projection X @ W^T of every time step is one batched matmul, then each step does the H @ R^T matmul
and the gate arithmetic, so the sequence length must be static (bind it with input_shapes); the batch may stay
symbolic. Supported: every direction, layout 0/1, biases, initial states, sequence_lens (steps past a
sequence's length leave its state and emit zeros, as the spec says), LSTM peepholes and input_forget, clip,
GRU linear_before_reset 0/1, and all the activations the spec lists.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class NodeContext:
    """What our converters know about the node they convert, beyond TVM's calling convention (absent inside an
    If branch: the importer computes every branch, so a run-time check there could fire for the branch not
    taken).

    `runtime_check(condition, format_args, message)`: the module raises InputError with `message` (a str.format
    template filled with the values of `format_args`, Relax expressions) when `condition`, a bool scalar Relax
    expression, is false at run time. The check runs after the whole graph (an assert cannot sit among the
    graph's pure ops), so a converter must still keep every bad value memory-safe."""

    node: object  # onnx.NodeProto
    label: str  # how messages name the node: its name, else its first output's
    runtime_check: object  # callable, see above
    indices_checked_on_host: bool = False  # Gather: its indices are a graph input Module checks before running


def _relax():
    from tvm import relax

    return relax


def _dtype(expr) -> str:
    dtype = expr.ty.dtype
    return str(getattr(dtype, "dtype", dtype))


def _static_dim(expr, axis, what, why="the recurrence is unrolled over it"):
    import tvm

    dim = expr.ty.shape.values[axis] if expr.ty.shape is not None else None
    if not isinstance(dim, tvm.tirx.IntImm):
        raise ValueError(f"{what} is {dim if dim is not None else 'unknown'}, not a static number: {why}, so bind "
                         "it with input_shapes / --input-shape")
    return int(dim)


def _const_value(expr):
    """numpy value of a constant input, else None."""
    import tvm

    if isinstance(expr, tvm.ir.GenericConst):
        return expr.value.numpy()
    return None


def _take(bb, expr, index, axis=0):
    """expr[index] along axis (drops the axis), folded when expr is a constant."""
    relax = _relax()
    value = _const_value(expr)
    if value is not None:
        return relax.const(np.ascontiguousarray(np.take(value, index, axis=axis)))
    return bb.emit(relax.op.take(expr, relax.const(index, "int64"), axis=axis, mode="clip"))


def _transpose2d(bb, expr):
    relax = _relax()
    value = _const_value(expr)
    if value is not None:
        return relax.const(np.ascontiguousarray(value.T))
    return bb.emit(relax.op.permute_dims(expr, [1, 0]))


def _slice(bb, expr, begin, end, axis=-1):
    relax = _relax()
    value = _const_value(expr)
    if value is not None:
        index = [slice(None)] * value.ndim
        index[axis] = slice(begin, end)
        return relax.const(np.ascontiguousarray(value[tuple(index)]))
    return bb.emit(relax.op.strided_slice(expr, axes=[axis], begin=[begin], end=[end]))


# -- activations (ONNX RNN activation names; alpha/beta defaults as onnxruntime uses them) -----------------------

_ALPHA_BETA = {  # name -> (takes alpha, takes beta, default alpha, default beta)
    "Relu": (False, False, None, None), "Tanh": (False, False, None, None), "Sigmoid": (False, False, None, None),
    "Softsign": (False, False, None, None), "Softplus": (False, False, None, None),
    "LeakyRelu": (True, False, 0.01, None), "ThresholdedRelu": (True, False, 1.0, None),
    "Elu": (True, False, 1.0, None), "HardSigmoid": (True, True, 0.2, 0.5), "ScaledTanh": (True, True, 1.0, 1.0),
    "Affine": (True, True, 1.0, 0.0),
}


def _activation(name, alpha, beta, dtype):
    relax = _relax()
    op = relax.op

    def c(v):
        return relax.const(v, dtype)

    table = {
        "Relu": lambda x: op.nn.relu(x),
        "Tanh": lambda x: op.tanh(x),
        "Sigmoid": lambda x: op.sigmoid(x),
        "Softsign": lambda x: op.divide(x, op.add(c(1.0), op.abs(x))),
        "Softplus": lambda x: op.add(op.maximum(x, c(0.0)), op.log(op.add(c(1.0), op.exp(op.negative(op.abs(x)))))),
        "LeakyRelu": lambda x: op.where(op.less(x, c(0.0)), op.multiply(c(alpha), x), x),
        "ThresholdedRelu": lambda x: op.where(op.greater(x, c(alpha)), x, c(0.0)),
        "Elu": lambda x: op.where(op.less(x, c(0.0)), op.multiply(c(alpha), op.subtract(op.exp(x), c(1.0))), x),
        "HardSigmoid": lambda x: op.clip(op.add(op.multiply(c(alpha), x), c(beta)), 0.0, 1.0),
        "ScaledTanh": lambda x: op.multiply(c(alpha), op.tanh(op.multiply(c(beta), x))),
        "Affine": lambda x: op.add(op.multiply(c(alpha), x), c(beta)),
    }
    return table[name]


def _activations(attrs, defaults, num_dirs, dtype):
    """Per direction, the list of activation callables (f, g[, h])."""
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in attrs.get("activations", ())] or None
    per_dir = len(defaults)
    if names is None:
        names = list(defaults) * num_dirs
    elif len(names) == per_dir and num_dirs == 2:
        names = names * 2
    if len(names) != per_dir * num_dirs:
        raise ValueError(f"activations lists {len(names)} functions; {per_dir} per direction x {num_dirs} expected")
    alphas = list(attrs.get("activation_alpha", ()))
    betas = list(attrs.get("activation_beta", ()))
    funcs = []
    by_lower = {k.lower(): k for k in _ALPHA_BETA}
    for name in names:
        canon = by_lower.get(name.lower())
        if canon is None:
            raise NotImplementedError(f"activation {name!r} is not one the ONNX spec lists for recurrent ops")
        takes_a, takes_b, da, db = _ALPHA_BETA[canon]
        alpha = (alphas.pop(0) if alphas else da) if takes_a else None
        beta = (betas.pop(0) if betas else db) if takes_b else None
        funcs.append(_activation(canon, alpha, beta, dtype))
    return [funcs[d * per_dir:(d + 1) * per_dir] for d in range(num_dirs)]


# -- LSTM / GRU / RNN -------------------------------------------------------------------------------------------

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DEFAULT_ACTS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}


def _recurrent(kind, bb, inputs, attrs, opset):
    relax = _relax()
    op = relax.op
    x, w, r = inputs[0], inputs[1], inputs[2]
    bias, seq_lens, init_h = inputs[3], inputs[4], inputs[5]
    init_c = inputs[6] if kind == "LSTM" else None
    peep = inputs[7] if kind == "LSTM" else None
    if x is None or w is None or r is None:
        raise ValueError(f"{kind} needs its X, W and R inputs")
    dtype = _dtype(x)
    gates = _GATES[kind]
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ValueError(f"direction {direction!r} is not forward, reverse or bidirectional")
    num_dirs = 2 if direction == "bidirectional" else 1
    layout = int(attrs.get("layout", 0))
    clip = attrs.get("clip")
    input_forget = int(attrs.get("input_forget", 0))
    linear_before_reset = int(attrs.get("linear_before_reset", 0))
    acts = _activations(attrs, _DEFAULT_ACTS[kind], num_dirs, dtype)

    if layout == 1:  # [batch, seq, in] -> [seq, batch, in]; states [batch, dirs, h] -> [dirs, batch, h]
        x = bb.emit(op.permute_dims(x, [1, 0, 2]))
        init_h = bb.emit(op.permute_dims(init_h, [1, 0, 2])) if init_h is not None else None
        init_c = bb.emit(op.permute_dims(init_c, [1, 0, 2])) if init_c is not None else None
    seq_len = _static_dim(x, 0, f"the sequence length of {kind} input X")
    hidden = _static_dim(r, 2, f"the hidden size of {kind} input R")
    if int(attrs.get("hidden_size", hidden)) != hidden:
        raise ValueError(f"hidden_size={attrs['hidden_size']} disagrees with R's shape (hidden {hidden})")
    batch = x.ty.shape.values[1]

    def c(v):
        return relax.const(v, dtype)

    def clipped(v):
        return op.clip(v, -float(clip), float(clip)) if clip is not None else v

    zeros = bb.emit(op.zeros(relax.ShapeExpr([batch, hidden]), dtype))
    mask_steps = None
    if seq_lens is not None:
        lens = bb.emit(op.astype(seq_lens, "int64"))
        lens = bb.emit(op.expand_dims(lens, 1))  # [batch, 1]
        mask_steps = [bb.emit(op.less(relax.const(t, "int64"), lens)) for t in range(seq_len)]

    ys, hs, cs = [], [], []
    for d in range(num_dirs):
        f_act = acts[d][0]
        w_t = _transpose2d(bb, _take(bb, w, d))  # [in, gates*h]
        r_d = _take(bb, r, d)  # [gates*h, h]
        xw = bb.emit(op.matmul(x, w_t))  # [seq, batch, gates*h]
        rb_rest = None  # recurrent bias that stays inside the step (GRU's Rbh)
        if bias is not None:
            b_d = _take(bb, bias, d)  # [2*gates*h]
            wb = _slice(bb, b_d, 0, gates * hidden)
            rb = _slice(bb, b_d, gates * hidden, 2 * gates * hidden)
            if kind == "GRU":  # Rbz, Rbr fold into the input projection; Rbh sits inside the reset product
                rb_zr = _slice(bb, rb, 0, 2 * hidden)
                rb_rest = _slice(bb, rb, 2 * hidden, 3 * hidden)
                rb_zr = bb.emit(op.concat([rb_zr, op.zeros(relax.ShapeExpr([hidden]), dtype)], axis=0))
                xw = bb.emit(op.add(xw, op.add(wb, rb_zr)))
            else:
                xw = bb.emit(op.add(xw, op.add(wb, rb)))
        if kind == "GRU":
            r_zr_t = _transpose2d(bb, _slice(bb, r_d, 0, 2 * hidden, axis=0))  # [h, 2h]
            r_h_t = _transpose2d(bb, _slice(bb, r_d, 2 * hidden, 3 * hidden, axis=0))  # [h, h]
        else:
            r_t = _transpose2d(bb, r_d)  # [h, gates*h]
        h = _take(bb, init_h, d) if init_h is not None else zeros
        cell = (_take(bb, init_c, d) if init_c is not None else zeros) if kind == "LSTM" else None
        if kind == "LSTM" and peep is not None:
            p_d = _take(bb, peep, d)
            p_i, p_o, p_f = (_slice(bb, p_d, k * hidden, (k + 1) * hidden) for k in range(3))
        steps = range(seq_len - 1, -1, -1) if (direction == "reverse" or d == 1) else range(seq_len)
        outputs = [None] * seq_len
        for t in steps:
            x_t = bb.emit(op.take(xw, relax.const(t, "int64"), axis=0, mode="clip"))  # [batch, gates*h]
            if kind == "LSTM":
                g_act, h_act = acts[d][1], acts[d][2]
                pre = bb.emit(op.add(x_t, op.matmul(h, r_t)))
                parts = bb.emit(op.split(pre, 4, axis=1))
                gi, go, gf, gc = (bb.emit(relax.TupleGetItem(parts, k)) for k in range(4))
                if peep is not None:
                    gi = op.add(gi, op.multiply(p_i, cell))
                    gf = op.add(gf, op.multiply(p_f, cell))
                i = bb.emit(f_act(clipped(gi)))
                f = bb.emit(op.subtract(c(1.0), i)) if input_forget else bb.emit(f_act(clipped(gf)))
                new_cell = bb.emit(op.add(op.multiply(f, cell), op.multiply(i, g_act(clipped(gc)))))
                if peep is not None:
                    go = op.add(go, op.multiply(p_o, new_cell))
                o = f_act(clipped(go))
                new_h = bb.emit(op.multiply(o, h_act(new_cell)))
            elif kind == "GRU":
                g_act = acts[d][1]
                parts = bb.emit(op.split(x_t, 3, axis=1))
                xz, xr, xh = (bb.emit(relax.TupleGetItem(parts, k)) for k in range(3))
                hzr = bb.emit(op.split(op.matmul(h, r_zr_t), 2, axis=1))
                z = bb.emit(f_act(clipped(op.add(xz, relax.TupleGetItem(hzr, 0)))))
                rs = bb.emit(f_act(clipped(op.add(xr, relax.TupleGetItem(hzr, 1)))))
                if linear_before_reset:
                    hr = op.matmul(h, r_h_t)
                    if rb_rest is not None:
                        hr = op.add(hr, rb_rest)
                    cand = op.add(xh, op.multiply(rs, hr))
                else:
                    cand = op.add(xh, op.matmul(op.multiply(rs, h), r_h_t))
                    if rb_rest is not None:
                        cand = op.add(cand, rb_rest)
                hh = bb.emit(g_act(clipped(cand)))
                new_h = bb.emit(op.add(op.multiply(op.subtract(c(1.0), z), hh), op.multiply(z, h)))
            else:
                new_h = bb.emit(f_act(clipped(op.add(x_t, op.matmul(h, r_t)))))
            if mask_steps is not None:  # past its length a sequence keeps its state and emits zeros
                keep = mask_steps[t]
                outputs[t] = bb.emit(op.where(keep, new_h, zeros))
                h = bb.emit(op.where(keep, new_h, h))
                if kind == "LSTM":
                    cell = bb.emit(op.where(keep, new_cell, cell))
            else:
                outputs[t] = new_h
                h = new_h
                if kind == "LSTM":
                    cell = new_cell
        ys.append(bb.emit(op.stack(outputs, axis=0)))  # [seq, batch, h]
        hs.append(h)
        cs.append(cell)

    y = bb.emit(op.stack(ys, axis=1))  # [seq, dirs, batch, h]
    y_h = bb.emit(op.stack(hs, axis=0))  # [dirs, batch, h]
    results = [y, y_h]
    if kind == "LSTM":
        results.append(bb.emit(op.stack(cs, axis=0)))
    if layout == 1:  # Y [batch, seq, dirs, h]; states [batch, dirs, h]
        results = [bb.emit(op.permute_dims(results[0], [2, 0, 1, 3]))] + [
            bb.emit(op.permute_dims(s, [1, 0, 2])) for s in results[1:]]
    return relax.Tuple(results)


def convert_lstm(bb, inputs, attrs, opset, stock=None):
    return _recurrent("LSTM", bb, inputs, attrs, opset)


def convert_gru(bb, inputs, attrs, opset, stock=None):
    return _recurrent("GRU", bb, inputs, attrs, opset)


def convert_rnn(bb, inputs, attrs, opset, stock=None):
    return _recurrent("RNN", bb, inputs, attrs, opset)


# -- Gather -----------------------------------------------------------------------------------------------------


def convert_gather(bb, inputs, attrs, opset, stock):
    """TVM's Gather, made memory-safe for runtime indices: its `take` runs in "fast" mode, which reads (and
    segfaults) out of bounds for an index past the axis, e.g. a token id >= the vocabulary in an embedding
    lookup. ONNX makes such an index an error. Ours takes in "nan" mode (NaN rows for float data) / "clip" mode
    (other dtypes), so no index ever reads outside the data; a bad constant index fails the import, and for
    indices computed in the graph the module raises at run time after the take (see _check_indices). In-range
    indices, negative ones included (TVM wraps them first), give exactly the stock result."""
    relax = _relax()
    out = stock()
    if isinstance(out, relax.Call) and getattr(out.op, "name", "") == "relax.take" and out.attrs.mode == "fast":
        data = out.args[0]
        axis = int(out.attrs.axis) if out.attrs.axis is not None else 0
        if data.ty.shape is not None:
            axis %= max(len(data.ty.shape.values), 1)
            _check_indices(bb, inputs[1], data, axis, attrs)
        mode = "nan" if _dtype(data).startswith(("float", "bfloat")) else "clip"
        out = relax.op.take(data, out.args[1], axis=out.attrs.axis, mode=mode)
    return out


def _check_indices(bb, indices, data, axis, attrs):
    """Make sure every one of a Gather's `indices` lies in [-n, n - 1], n = data.shape[axis]. Constant indices
    over a static axis are checked here (a bad one fails the import); other indices get a run-time check (the
    module raises InputError naming the node), unless they are a graph input the module already checks before
    running (TensorSpec.check_indices: cheaper, and it names the position) or the node sits in an If branch.
    Constant indices over a symbolic axis stay unchecked (NaN / clamped rows), as do uint / shape indices."""
    import tvm

    relax = _relax()
    size = data.ty.shape.values[axis]
    value = _const_value(indices)
    if value is not None:
        if isinstance(size, tvm.tirx.IntImm) and value.size:
            n = int(size)
            bad = value[(value < -n) | (value >= n)]
            if bad.size:
                raise ValueError(f"constant index {bad.flat[0]} is out of range for axis {axis} of size {n}: "
                                 f"indices must lie in [{-n}, {n - 1}]")
        return
    context = attrs.get("tvm_custom", {}).get("xcomp")
    if context is None or context.indices_checked_on_host or not isinstance(indices.ty, relax.TensorType):
        return
    dtype = _dtype(indices)
    if dtype not in ("int32", "int64"):  # the only index types ONNX allows
        return
    label = context.label.replace("{", "{{").replace("}", "}}")  # the message is a str.format template
    low, high = relax.op.min(indices), relax.op.max(indices)  # an empty `indices` passes: min > max
    if isinstance(size, tvm.tirx.IntImm):
        n = int(size)
        if n > np.iinfo(dtype).max:  # every value of the dtype is in range
            return
        limit, negated, format_args = relax.const(n, dtype), relax.const(-n, dtype), [low, high]
        message = (f"Gather node {label!r}: index out of range for axis {axis} of size {n}: indices must lie in "
                   f"[{-n}, {n - 1}], got values from {{}} to {{}}")
    else:  # symbolic: the size as the module runs
        shape = bb.normalize(relax.op.shape_to_tensor(relax.op.shape_of(data)))
        limit = relax.op.take(shape, relax.const(axis, "int64"), axis=0)
        limit = bb.normalize(limit if dtype == "int64" else relax.op.astype(limit, dtype))
        negated, format_args = relax.op.negative(limit), [limit, low, high]
        message = (f"Gather node {label!r}: index out of range for axis {axis} of size {{}}: indices must lie in "
                   "[-size, size - 1], got values from {} to {}")
    in_range = relax.op.logical_and(relax.op.greater_equal(low, negated), relax.op.less(high, limit))
    context.runtime_check(in_range, format_args, message)


# -- Reshape ----------------------------------------------------------------------------------------------------


def convert_reshape(bb, inputs, attrs, opset, stock):
    """TVM's Reshape, taking a scalar computed from shapes. The importer folds Shape -> Gather/Squeeze -> Mul
    into a primitive value (a symbolic dim such as `batch * heads`); torch's dynamo exporter then reshapes it to
    [1] to concatenate a new shape (nn.MultiheadAttention does), and the stock converter refuses a non-tensor
    input. A reshape to one element stays a shape value, so the shape built from it stays symbolic and the
    Reshape that consumes it static; any other target reshapes the value as an int64 tensor."""
    import tvm

    relax = _relax()
    data, target = inputs[0], inputs[1]
    if tvm.ir.is_prim_expr(data) and not isinstance(data, relax.Var):
        if _dtype(data) not in ("int64", "int32"):
            raise NotImplementedError(f"Reshape of a {_dtype(data)} scalar computed from shapes")
        dim = data if _dtype(data) == "int64" else tvm.tirx.Cast("int64", data)
        target_value = _const_value(target)
        if target_value is not None and target_value.tolist() in ([1], [-1]):
            return relax.ShapeExpr([dim])
        as_tensor = bb.normalize(relax.op.shape_to_tensor(relax.ShapeExpr([dim])))
        return stock([as_tensor] + list(inputs[1:]))
    return stock()


# -- Slice ------------------------------------------------------------------------------------------------------


def convert_slice(bb, inputs, attrs, opset, stock):
    """Slice before opset 10 takes starts, ends and (optional) axes as attributes; TVM's converter reads them
    from inputs only, so they are handed to it as constant inputs (axes: the first len(starts) axes)."""
    if opset >= 10:
        return stock()
    relax = _relax()
    # exporters write "to the end" as INT64_MAX; handed over as constants, such bounds came out truncated to
    # 32 bits (INT64_MAX -> -1: one element short), so they are clamped to what int32 holds first
    starts, ends = (np.clip(np.asarray(attrs[name], np.int64), -2**31 + 1, 2**31 - 1) for name in ("starts", "ends"))
    axes = np.asarray(attrs.get("axes", range(len(starts))), np.int64)
    return stock([inputs[0], *(relax.const(v) for v in (starts, ends, axes))])


# -- PRelu ------------------------------------------------------------------------------------------------------


def convert_prelu(bb, inputs, attrs, opset, stock):
    """PReLU as where(x < 0, x * slope, x). Before opset 7 a [C] slope runs along the channel axis (axis 1),
    which TVM's converter gets wrong (it asserts while legalizing; torch exported nn.PReLU(num_parameters=C)
    that way); from opset 7 the slope broadcasts to x as in numpy, so the elementwise ops take it as it is."""
    relax = _relax()
    data, slope = inputs[0], inputs[1]
    ndim, slope_shape = data.ty.ndim, list(slope.ty.shape)
    if opset < 7 and len(slope_shape) == 1 and ndim > 2:
        slope = bb.normalize(relax.op.reshape(slope, [slope_shape[0]] + [1] * (ndim - 2)))
    negative = relax.op.less(data, relax.const(0, _dtype(data)))
    return relax.op.where(negative, relax.op.multiply(data, slope), data)


# -- LayerNormalization -----------------------------------------------------------------------------------------


def convert_layer_norm(bb, inputs, attrs, opset, stock):
    """TVM's LayerNormalization computes Y only: its Mean and InvStdDev outputs are scalar zeros. When the node
    asks for them, they are computed here in the stash type (float32), over the normalized axes, kept as size-1
    dims as the spec says; Y stays TVM's fused layer_norm."""
    relax = _relax()
    result = stock()
    context = attrs.get("tvm_custom", {}).get("xcomp")
    rank = inputs[0].ty.ndim
    wanted = context is None or any(context.node.output[1:])  # (None: inside an If branch, node unknown)
    if not wanted or rank < 0 or not isinstance(result, relax.Tuple):
        return result
    data = inputs[0] if _dtype(inputs[0]) == "float32" else relax.op.astype(inputs[0], "float32")
    axes = list(range(attrs.get("axis", -1) % rank, rank))
    mean = bb.normalize(relax.op.mean(data, axes, keepdims=True))
    centered = bb.normalize(relax.op.subtract(data, mean))
    variance = relax.op.mean(relax.op.multiply(centered, centered), axes, keepdims=True)
    epsilon = relax.const(attrs.get("epsilon", 1e-5), "float32")
    return relax.Tuple([result.fields[0], mean, relax.op.rsqrt(relax.op.add(variance, epsilon))])


# -- BatchNormalization, IsInf, Pow, NonMaxSuppression: attributes and dtypes TVM's converters pass over ------


def convert_batch_norm(bb, inputs, attrs, opset, stock):
    """training_mode=1 normalizes with the batch's own statistics and outputs updated running ones. TVM's
    converter passes the flag on, but DecomposeOpsForInference then uses the running statistics: wrong numbers.
    That mode is computed here; inference stays TVM's (folded into the conv before it)."""
    if not attrs.get("training_mode", 0):
        return stock()
    relax = _relax()
    data, scale, bias, running_mean, running_var = inputs[:5]
    rank = data.ty.ndim
    if rank < 2:
        raise NotImplementedError("BatchNormalization training_mode=1 of an input of unknown rank")
    axes = [0, *range(2, rank)]
    per_channel = [1, -1] + [1] * (rank - 2)
    mean = bb.normalize(relax.op.mean(data, axes, keepdims=True))
    centered = bb.normalize(relax.op.subtract(data, mean))
    variance = bb.normalize(relax.op.mean(relax.op.multiply(centered, centered), axes, keepdims=True))
    dtype = _dtype(data)
    epsilon, momentum = (relax.const(attrs.get(k, d), dtype) for k, d in (("epsilon", 1e-5), ("momentum", 0.9)))
    normalized = relax.op.multiply(centered, relax.op.rsqrt(relax.op.add(variance, epsilon)))
    y = relax.op.add(relax.op.multiply(normalized, relax.op.reshape(scale, per_channel)),
                     relax.op.reshape(bias, per_channel))
    keep = relax.op.subtract(relax.const(1, dtype), momentum)

    def updated(running, current):
        return relax.op.add(relax.op.multiply(running, momentum),
                            relax.op.multiply(relax.op.reshape(current, [-1]), keep))

    return relax.Tuple([y, updated(running_mean, mean), updated(running_var, variance)])


def convert_is_inf(bb, inputs, attrs, opset, stock):
    """TVM's IsInf ignores detect_positive / detect_negative (it flagged -inf when asked for +inf only)."""
    relax = _relax()
    positive, negative = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    if positive and negative:
        return stock()
    data = inputs[0]
    zero = relax.const(0, _dtype(data))
    sign = relax.op.greater(data, zero) if positive else relax.op.less(data, zero) if negative else \
        relax.op.not_equal(data, data)  # neither: never true for an infinity
    return relax.op.logical_and(relax.op.isinf(data), sign)


def convert_pow(bb, inputs, attrs, opset, stock):
    """Pow's exponent may have another type than its base, and both may be integers; TVM's power wants one
    float type. The result has the base's type (the spec): integers are raised in float64 (exact for the
    magnitudes an int64 holds in 53 bits), a float base takes the exponent in its own type."""
    relax = _relax()
    base, exponent = inputs[0], inputs[1]
    base_type, exponent_type = _dtype(base), _dtype(exponent)
    if base_type.startswith(("float", "bfloat")):
        return stock() if exponent_type == base_type else relax.op.power(base, relax.op.astype(exponent, base_type))
    power = relax.op.power(relax.op.astype(base, "float64"), relax.op.astype(exponent, "float64"))
    return relax.op.astype(power, base_type)


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
    threshold = np.nextafter(np.float32(_const_value(inputs[3]).item()), np.float32(np.inf))
    return stock([*inputs[:3], _relax().const(threshold, "float32"), *inputs[4:]])


# -- NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss ----------------------------------------------------------


def _nll_loss(bb, log_prob, target, weight, attrs):
    """loss[n, d...] = -log_prob[n, target[n, d...], d...] * weight[target], 0 where target == ignore_index;
    reduced by 'none', 'sum' or 'mean' (the sum over the weights that applied, as the spec says)."""
    relax = _relax()
    reduction = attrs.get("reduction", b"mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    dtype = _dtype(log_prob)
    target = bb.normalize(relax.op.astype(target, "int64"))
    ignore = attrs.get("ignore_index")
    kept = relax.op.not_equal(target, relax.const(ignore, "int64")) if ignore is not None else None
    if kept is not None:  # an ignored target may lie outside [0, C): read class 0 there, weighted 0 below
        target = bb.normalize(relax.op.where(kept, target, relax.const(0, "int64")))
    picked = relax.op.squeeze(relax.op.gather_elements(log_prob, relax.op.expand_dims(target, 1), axis=1), [1])
    weights = relax.op.take(weight, target, axis=0) if weight is not None else relax.op.ones_like(picked)
    if kept is not None:
        weights = relax.op.where(kept, weights, relax.op.zeros_like(weights))
    weights = bb.normalize(weights)
    loss = bb.normalize(relax.op.negative(relax.op.multiply(picked, weights)))
    if reduction == "none":
        return loss
    total = relax.op.sum(loss)
    if reduction == "sum":
        return total
    if reduction != "mean":
        raise NotImplementedError(f"reduction {reduction!r}")
    return relax.op.divide(total, relax.op.sum(weights)) if weight is not None or kept is not None else \
        relax.op.divide(total, relax.const(np.prod([int(d) for d in target.ty.shape.values]), dtype))


def convert_nll_loss(bb, inputs, attrs, opset, stock=None):
    return _nll_loss(bb, inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None, attrs)


def convert_softmax_cross_entropy(bb, inputs, attrs, opset, stock=None):
    """log_softmax over the class axis (1), then the NLL loss; the second output is that log_softmax."""
    relax = _relax()
    log_prob = bb.normalize(relax.op.nn.log_softmax(inputs[0], axis=1))
    loss = _nll_loss(bb, log_prob, inputs[1], inputs[2] if len(inputs) > 2 else None, attrs)
    return relax.Tuple([loss, log_prob])


# -- Split ------------------------------------------------------------------------------------------------------


def convert_split(bb, inputs, attrs, opset, stock):
    """Split into parts some of which are empty: TVM's split wants strictly increasing cut points (an internal
    error), so such a split is one slice per part."""
    relax = _relax()
    sizes = attrs.get("split") if opset < 13 else (_const_value(inputs[1]) if len(inputs) > 1 and
                                                   inputs[1] is not None else None)
    if sizes is None or 0 not in list(np.asarray(sizes).ravel()):
        return stock()
    axis = attrs.get("axis", 0)
    bounds = np.concatenate([[0], np.cumsum(np.asarray(sizes, np.int64))])
    return relax.Tuple([bb.normalize(relax.op.strided_slice(inputs[0], [axis], [int(b)], [int(e)]))
                        for b, e in zip(bounds[:-1], bounds[1:])])


# -- CenterCropPad ----------------------------------------------------------------------------------------------


def convert_center_crop_pad(bb, inputs, attrs, opset, stock=None):
    """CenterCropPad (opset 18; TVM has no converter): per axis, a centred slice where the target is smaller
    (an odd surplus leaves the extra element at the end) and centred zero padding where it is larger."""
    from tvm import topi

    relax = _relax()
    data, target = inputs[0], _const_value(inputs[1])
    if target is None:
        raise NotImplementedError("CenterCropPad with a shape computed in the graph")
    rank = data.ty.ndim
    dims = [_static_dim(data, axis, f"axis {axis} of CenterCropPad's input", "the crop and pad are planned from it")
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
    position = _const_value(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else None
    if position is None or int(position) >= 0:
        return stock()
    length = len(inputs[0].fields) if isinstance(inputs[0], _relax().Tuple) else None
    if length is None:
        raise NotImplementedError("SequenceInsert at a negative position into a sequence of unknown length")
    return stock([inputs[0], inputs[1], _relax().const(int(position) + length, "int64")])


# -- Expand -----------------------------------------------------------------------------------------------------


def convert_expand(bb, inputs, attrs, opset, stock):
    """TVM's Expand, with a run-time shape tensor made to broadcast as ONNX says. TVM broadcasts to that shape as
    given, so a 1 where the input has 3 gave a size-1 axis: wrong numbers. ONNX keeps the input's size there, so
    the shape handed over is where(shape == 1, input shape, shape), right-aligned with the input's rank."""
    import tvm

    relax = _relax()
    data, shape = inputs[0], inputs[1]
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


# -- Resize -----------------------------------------------------------------------------------------------------


def convert_resize(bb, inputs, attrs, opset, stock):
    """TVM's Resize, refusing what it would get wrong. Its resize maps output to input coordinates by the ratio
    of the sizes; ONNX maps them by the given scale, and the two differ when size x scale is not a whole number
    (a 0.6 downscale of 4 pixels gives 2, a ratio of 0.5). It has no antialias filter and ignores
    keep_aspect_ratio_policy. Scales or sizes given for some axes (opset 18) are spread over every axis."""
    import tvm

    policy = attrs.get("keep_aspect_ratio_policy", b"stretch")
    if (policy.decode() if isinstance(policy, bytes) else policy) != "stretch":
        raise NotImplementedError(f"Resize with keep_aspect_ratio_policy={policy!r}: TVM's resize ignores it")
    if attrs.get("axes") is not None:
        inputs = _resize_on_every_axis(inputs, attrs.pop("axes"))
    scale_input = 1 if opset < 11 else 2
    scales = _const_value(inputs[scale_input]) if len(inputs) > scale_input and inputs[scale_input] is not None \
        else None
    if attrs.get("antialias", 0) and _downsamples(inputs[0], scales, inputs[3] if len(inputs) > 3 else None):
        raise NotImplementedError("Resize with antialias=1 when downsampling: TVM's resize has no antialias filter")
    transform = attrs.get("coordinate_transformation_mode", b"half_pixel")
    transform = transform.decode() if isinstance(transform, bytes) else transform
    if scales is not None and scales.size and transform not in ("align_corners", "tf_crop_and_resize"):
        shape = inputs[0].ty.shape.values if inputs[0].ty.shape is not None else []
        for dim, scale in zip(shape, scales.tolist()):
            if isinstance(dim, tvm.tirx.IntImm) and int(dim) * scale != int(int(dim) * scale):
                raise NotImplementedError(
                    f"Resize by scale {scale:g} of an axis of size {int(dim)}: the output size "
                    f"{int(int(dim) * scale)} is not size x scale, and TVM's resize maps coordinates by the size "
                    f"ratio where ONNX uses the scale ({transform}); give the model sizes instead of scales")
    return stock(inputs)


def _resize_on_every_axis(inputs, axes):
    """A Resize's roi / scales / sizes given for `axes` only (opset 18), as TVM reads them: for every axis, the
    others unchanged (roi 0..1, scale 1, their own size)."""
    import tvm

    relax = _relax()
    data = inputs[0]
    rank = data.ty.ndim
    axes = [a % rank for a in axes]
    dims = data.ty.shape.values if data.ty.shape is not None else []
    full = list(inputs)
    for position, (default, dtype) in {1: (None, "float32"), 2: (1.0, "float32"), 3: (None, "int64")}.items():
        value = _const_value(inputs[position]) if len(inputs) > position and inputs[position] is not None else None
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
    return type(inputs)(full) if not isinstance(inputs, list) else full


def _downsamples(data, scales, sizes) -> bool:
    """Whether a Resize shrinks some axis (unknown counts as yes)."""
    import tvm

    if scales is not None and scales.size:
        return bool((scales < 1).any())
    sizes = _const_value(sizes) if sizes is not None else None
    shape = data.ty.shape.values if data.ty.shape is not None else None
    if sizes is None or shape is None or len(sizes) != len(shape):
        return True
    return any(not isinstance(d, tvm.tirx.IntImm) or int(n) < int(d) for n, d in zip(sizes.tolist(), shape))


# -- ReduceMax / ReduceMin --------------------------------------------------------------------------------------


def _reduce_extreme(extreme):
    """ReduceMax / ReduceMin, mending two cases TVM gets wrong. Over an axis of size 0, ONNX gives -inf / +inf
    (the lowest / highest value of an integer type), and TVM's reduction leaves such an output unwritten
    (garbage): the result is then a constant. And TVM has no max/min of bool: it reduces uint8 instead."""

    def convert(bb, inputs, attrs, opset, stock):
        import tvm

        relax = _relax()
        data = inputs[0]
        if _dtype(data) == "bool":
            as_bytes = bb.normalize(relax.op.astype(data, "uint8"))
            return relax.op.astype(convert(bb, [as_bytes, *inputs[1:]], attrs, opset,
                                           lambda: stock([as_bytes, *inputs[1:]])), "bool")
        result = stock()
        shape = data.ty.shape.values if data.ty.shape is not None else None
        if shape is None or not any(isinstance(d, tvm.tirx.IntImm) and int(d) == 0 for d in shape):
            return result
        result = bb.normalize(result)
        out_shape = result.ty.shape
        if out_shape is None or any(not isinstance(d, tvm.tirx.IntImm) for d in out_shape.values):
            raise NotImplementedError("a reduction over an empty axis with a symbolic output shape")
        dtype = _dtype(data)
        if np.dtype(dtype).kind == "f":
            fill = -np.inf if extreme == "max" else np.inf
        else:
            fill = np.iinfo(dtype).min if extreme == "max" else np.iinfo(dtype).max
        return relax.const(np.full([int(d) for d in out_shape.values], fill, dtype))

    return convert


CONVERTERS = {
    "CenterCropPad": convert_center_crop_pad,
    "Split": convert_split,
    "SequenceInsert": convert_sequence_insert,
    "NegativeLogLikelihoodLoss": convert_nll_loss,
    "SoftmaxCrossEntropyLoss": convert_softmax_cross_entropy,
    "BatchNormalization": convert_batch_norm,
    "IsInf": convert_is_inf,
    "Pow": convert_pow,
    "NonMaxSuppression": convert_non_max_suppression,
    "LayerNormalization": convert_layer_norm,
    "Expand": convert_expand,
    "Resize": convert_resize,
    "ReduceMax": _reduce_extreme("max"),
    "ReduceMin": _reduce_extreme("min"),
    "PRelu": convert_prelu,
    "Reshape": convert_reshape,
    "LSTM": convert_lstm,
    "GRU": convert_gru,
    "RNN": convert_rnn,
    "Gather": convert_gather,
    "Slice": convert_slice,
}

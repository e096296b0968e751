"""Recurrent ops (LSTM, GRU, RNN) have no converter in TVM 0.27. Ours unrolls the recurrence over the sequence:
the input projection X @ W^T of every time step is one batched matmul, then each step does the H @ R^T matmul
and the gate arithmetic, so the sequence length must be static (bind it with input_shapes); the batch may stay
symbolic. Supported: every direction, layout 0/1, biases, initial states, sequence_lens (steps past a
sequence's length leave its state and emit zeros, as the spec says), LSTM peepholes and input_forget, clip,
GRU linear_before_reset 0/1, and all the activations the spec lists."""

from __future__ import annotations

from .common import dtype_of, relax_api, slice_axis, static_dim, string_attr, take_index, transpose2d


# -- activations (ONNX RNN activation names; alpha/beta defaults as onnxruntime uses them) -----------------------

_ALPHA_BETA = {  # name -> (takes alpha, takes beta, default alpha, default beta)
    "Relu": (False, False, None, None), "Tanh": (False, False, None, None), "Sigmoid": (False, False, None, None),
    "Softsign": (False, False, None, None), "Softplus": (False, False, None, None),
    "LeakyRelu": (True, False, 0.01, None), "ThresholdedRelu": (True, False, 1.0, None),
    "Elu": (True, False, 1.0, None), "HardSigmoid": (True, True, 0.2, 0.5), "ScaledTanh": (True, True, 1.0, 1.0),
    "Affine": (True, True, 1.0, 0.0),
}


def _activation(name, alpha, beta, dtype):
    relax = relax_api()
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
    relax = relax_api()
    op = relax.op
    x, w, r = inputs[0], inputs[1], inputs[2]
    bias, seq_lens, init_h = inputs[3], inputs[4], inputs[5]
    init_c = inputs[6] if kind == "LSTM" else None
    peep = inputs[7] if kind == "LSTM" else None
    if x is None or w is None or r is None:
        raise ValueError(f"{kind} needs its X, W and R inputs")
    dtype = dtype_of(x)
    gates = _GATES[kind]
    direction = string_attr(attrs, "direction", "forward")
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
    seq_len = static_dim(x, 0, f"the sequence length of {kind} input X")
    hidden = static_dim(r, 2, f"the hidden size of {kind} input R")
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
        w_t = transpose2d(bb, take_index(bb, w, d))  # [in, gates*h]
        r_d = take_index(bb, r, d)  # [gates*h, h]
        xw = bb.emit(op.matmul(x, w_t))  # [seq, batch, gates*h]
        rb_rest = None  # recurrent bias that stays inside the step (GRU's Rbh)
        if bias is not None:
            b_d = take_index(bb, bias, d)  # [2*gates*h]
            wb = slice_axis(bb, b_d, 0, gates * hidden)
            rb = slice_axis(bb, b_d, gates * hidden, 2 * gates * hidden)
            if kind == "GRU":  # Rbz, Rbr fold into the input projection; Rbh sits inside the reset product
                rb_zr = slice_axis(bb, rb, 0, 2 * hidden)
                rb_rest = slice_axis(bb, rb, 2 * hidden, 3 * hidden)
                rb_zr = bb.emit(op.concat([rb_zr, op.zeros(relax.ShapeExpr([hidden]), dtype)], axis=0))
                xw = bb.emit(op.add(xw, op.add(wb, rb_zr)))
            else:
                xw = bb.emit(op.add(xw, op.add(wb, rb)))
        if kind == "GRU":
            r_zr_t = transpose2d(bb, slice_axis(bb, r_d, 0, 2 * hidden, axis=0))  # [h, 2h]
            r_h_t = transpose2d(bb, slice_axis(bb, r_d, 2 * hidden, 3 * hidden, axis=0))  # [h, h]
        else:
            r_t = transpose2d(bb, r_d)  # [h, gates*h]
        h = take_index(bb, init_h, d) if init_h is not None else zeros
        cell = (take_index(bb, init_c, d) if init_c is not None else zeros) if kind == "LSTM" else None
        if kind == "LSTM" and peep is not None:
            p_d = take_index(bb, peep, d)
            p_i, p_o, p_f = (slice_axis(bb, p_d, k * hidden, (k + 1) * hidden) for k in range(3))
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

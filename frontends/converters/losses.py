"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""

from __future__ import annotations

import numpy as np

from .common import dtype_of, relax_api, string_attr


def _nll_loss(bb, log_prob, target, weight, attrs):
    """loss[n, d...] = -log_prob[n, target[n, d...], d...] * weight[target], 0 where target == ignore_index;
    reduced by 'none', 'sum' or 'mean' (the sum over the weights that applied, as the spec says)."""
    relax = relax_api()
    reduction = string_attr(attrs, "reduction", "mean")
    dtype = dtype_of(log_prob)
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
    relax = relax_api()
    log_prob = bb.normalize(relax.op.nn.log_softmax(inputs[0], axis=1))
    loss = _nll_loss(bb, log_prob, inputs[1], inputs[2] if len(inputs) > 2 else None, attrs)
    return relax.Tuple([loss, log_prob])

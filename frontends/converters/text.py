"""TfIdfVectorizer (TVM's importer lacks it): n-gram counts of integer token sequences, as tensor ops.

For every n-gram length n and skip distance d the op counts, at each start position s, whether the tokens at
s, s + d, ..., s + (n - 1) d form one of the pool's n-grams. With the sequence length static that is, per
(n, d): n shifted slices of the tokens compared with the pool's n-grams (broadcast equality, AND over the n
positions), summed over positions, then scattered to the output columns by a constant 0/1 matrix. Unigrams
count once, not once per skip distance, as the ONNX reference and onnxruntime do. A string pool is refused: xcomp
modules hold numeric tensors only.
"""

from __future__ import annotations

import numpy as np

from .common import dtype_of, relax_api, static_dim, string_attr


def _pool_ngrams(attrs) -> dict:
    """{n: ([pool n-grams as rows], [their output columns])} for n in [min_gram_length, max_gram_length]."""
    pool = [int(v) for v in attrs.get("pool_int64s", ())]
    counts = [int(v) for v in attrs["ngram_counts"]]
    indexes = [int(v) for v in attrs["ngram_indexes"]]
    low, high = int(attrs["min_gram_length"]), int(attrs["max_gram_length"])
    grams, gram_id = {}, 0  # ids run over every pool n-gram, in pool order, whatever its length
    for size, start in enumerate(counts, 1):
        end = counts[size] if size < len(counts) else len(pool)
        rows = [pool[i:i + size] for i in range(start, end - size + 1, size)]
        if low <= size <= high and rows:
            grams[size] = (np.array(rows, np.int64), indexes[gram_id:gram_id + len(rows)])
        gram_id += len(rows)
    return grams


def _counts_of(bb, tokens, grams, length, skip):
    """[batch, pool n-grams] float32: how often each n-gram (rows of `grams`, [P, n]) occurs at stride `skip`
    in `tokens` [batch, length]."""
    relax = relax_api()
    op = relax.op
    n = grams.shape[1]
    starts = length - skip * (n - 1)
    match = None
    for k in range(n):
        window = op.strided_slice(tokens, axes=[1], begin=[k * skip], end=[k * skip + starts])  # [batch, starts]
        column = relax.const(grams[:, k].astype(dtype_of(tokens)))  # [P]
        equal = op.equal(op.expand_dims(window, 2), column)  # [batch, starts, P]
        match = equal if match is None else op.logical_and(match, equal)
    return bb.emit(op.sum(op.astype(match, "float32"), axis=1))


def convert_tfidf_vectorizer(bb, inputs, attrs, opset, stock=None):
    relax = relax_api()
    op = relax.op
    if attrs.get("pool_strings"):
        raise NotImplementedError("TfIdfVectorizer with a string pool (pool_strings): xcomp modules take numeric "
                                  "tensors only")
    x = inputs[0]
    rank = x.ty.ndim
    if rank not in (1, 2):
        raise ValueError(f"TfIdfVectorizer takes [C] or [N, C] tokens, not rank {rank}")
    tokens = bb.emit(op.expand_dims(x, 0)) if rank == 1 else x
    length = static_dim(tokens, 1, "TfIdfVectorizer's sequence length C",
                        "its n-gram windows are laid out at import")
    mode = string_attr(attrs, "mode", "TF")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ValueError(f"mode {mode!r} is not TF, IDF or TFIDF")
    width = max(int(i) for i in attrs["ngram_indexes"]) + 1
    max_skip = int(attrs.get("max_skip_count", 0))
    total = None
    for n, (grams, columns) in _pool_ngrams(attrs).items():
        scatter = np.zeros((len(grams), width), np.float32)
        scatter[np.arange(len(grams)), columns] = 1.0
        # a unigram is the same at every skip distance: counted once
        skips = [s for s in range(1, max_skip + 2) if n > 1 or s == 1]
        counts = [_counts_of(bb, tokens, grams, length, s) for s in skips if length - s * (n - 1) > 0]
        if counts:
            summed = counts[0]
            for c in counts[1:]:
                summed = bb.emit(op.add(summed, c))
            part = bb.emit(op.matmul(summed, relax.const(scatter)))
            total = part if total is None else bb.emit(op.add(total, part))
    batch = tokens.ty.shape.values[0]
    if total is None:  # no n-gram fits the sequence or the pool has none of the lengths asked for
        total = bb.emit(op.zeros(relax.ShapeExpr([batch, width]), "float32"))
    weights = attrs.get("weights")
    if mode == "IDF":
        present = op.astype(op.greater(total, relax.const(0.0, "float32")), "float32")
        total = op.multiply(present, relax.const(np.asarray(weights, np.float32))) if weights else present
    elif mode == "TFIDF" and weights:
        total = op.multiply(total, relax.const(np.asarray(weights, np.float32)))
    total = bb.emit(total)
    return bb.emit(op.squeeze(total, [0])) if rank == 1 else total

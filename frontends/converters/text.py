"""TfIdfVectorizer (TVM's importer has none), as comparisons against the constant n-gram pool.

The sequence length is static, so every window the op reads (n tokens, 1 to max_skip_count + 1 apart) is a
constant list of positions: for each gram length n the converter gathers all n-token windows of a row at once,
compares them with the pool's n-grams, and counts the windows that match all n tokens. A constant matrix then adds
each pool n-gram's (weighted) count into its output column.

Counting follows onnx.reference and onnxruntime, which agree: unigrams are counted once whatever the skip, and an
n-gram needs all its tokens inside the row. Weights belong to pool n-grams, as the spec and onnxruntime have it
(onnx.reference indexes them by output column instead: the two differ unless ngram_indexes is 0, 1, 2, ...).
"""

from __future__ import annotations

import numpy as np

from .common import relax_api, static_dim, string_attr

MODES = ("TF", "IDF", "TFIDF")


def _rows(x):
    """The input as int64 rows [batch, C] (a [C] input is one row), its batch and its static C."""
    relax = relax_api()
    rank = x.ty.ndim
    if rank not in (1, 2):
        raise ValueError(f"TfIdfVectorizer input of rank {rank}, not [C] or [N, C]")
    length = static_dim(x, rank - 1, "TfIdfVectorizer's sequence length", "its n-gram windows are cut at import")
    rows = x if rank == 2 else relax.op.reshape(x, [1, length])
    return relax.op.astype(rows, "int64"), x.ty.shape.values[0] if rank == 2 else 1, length


def _pool(attrs, min_n, max_n, numbered):
    """{n: (grams [P, n], ids [P])}: the distinct pool n-grams of each length n in [min_n, max_n], and their
    numbers in the pool, which index ngram_indexes and weights (`numbered` of them)."""
    if "pool_strings" in attrs:
        raise ValueError("string pool not supported (pool_strings): only pool_int64s")
    pool = np.asarray(attrs.get("pool_int64s", ()), np.int64)
    starts = list(attrs["ngram_counts"]) + [len(pool)]
    grams, first_id = {}, 0  # pool n-grams are numbered across all lengths, in order
    for n, (start, end) in enumerate(zip(starts, starts[1:]), 1):
        count = max(end - start, 0) // n
        if min_n <= n <= max_n and count:
            ids = {}  # a repeated n-gram keeps its last number, as onnx.reference's trie does (onnxruntime refuses)
            for number, gram in enumerate(pool[start:start + count * n].reshape(count, n), first_id):
                ids[tuple(gram)] = number
            grams[n] = (np.array(list(ids), np.int64).reshape(-1, n), np.array(list(ids.values())))
        first_id += count
    if first_id > numbered:
        raise ValueError(f"ngram_indexes has {numbered} entries, fewer than the pool's {first_id} n-grams")
    return grams


def _windows(length, n, max_skip):
    """[W, n] token positions of every n-token window in a row of `length` tokens, tokens d = 1 .. max_skip + 1
    apart (unigrams d = 1 only: the reference counts each token once)."""
    strides = [1] if n == 1 else range(1, max_skip + 2)
    windows = [np.arange(length - (n - 1) * d)[:, None] + d * np.arange(n) for d in strides
               if (n - 1) * d < length]
    return np.concatenate(windows) if windows else np.zeros((0, n), np.int64)


def _matches(rows, grams, windows):
    """[batch, P] float32: how many of a row's windows hold each of the P n-grams."""
    relax = relax_api()
    tokens = relax.op.take(rows, relax.const(windows, "int64"), axis=1)  # [batch, W, n]
    equal = relax.op.equal(relax.op.expand_dims(tokens, 2), relax.const(grams, "int64"))  # [batch, W, P, n]
    return relax.op.sum(relax.op.prod(relax.op.astype(equal, "float32"), axis=-1), axis=1)


def _counts(rows, length, grams, max_skip):
    """[batch, P] float32 counts of the pool n-grams that fit in a row, and their ids [P]; (None, None) if none
    fits."""
    relax = relax_api()
    counted, ids = [], []
    for n, (pool, pool_ids) in grams.items():
        windows = _windows(length, n, max_skip)
        if len(windows):
            counted.append(_matches(rows, pool, windows))
            ids.append(pool_ids)
    if not counted:
        return None, None
    return relax.op.concat(counted, axis=1), np.concatenate(ids)


def _idf_weights(columns, weights, width):
    """Each output column's weight in IDF mode: that of the pool n-grams counting into it."""
    column_weights = np.ones(width, np.float32)
    for column in np.unique(columns):
        shared = np.unique(weights[columns == column])
        if len(shared) > 1:  # onnxruntime takes the weight of whichever n-gram it meets last in the row
            listed = ", ".join(f"{w:g}" for w in shared)
            raise ValueError(f"TfIdfVectorizer IDF: n-grams with different weights ({listed}) share output column "
                             f"{column}")
        column_weights[column] = shared[0]
    return column_weights


def _weigh(counts, mode, columns, weights, width):
    """[batch, width]: the counts [batch, P] of pool n-grams weighed for `mode` and added into their columns."""
    relax = relax_api()
    scatter = np.zeros((len(columns), width), np.float32)
    scatter[np.arange(len(columns)), columns] = weights if mode == "TFIDF" else 1
    per_column = relax.op.matmul(counts, relax.const(scatter))
    if mode != "IDF":
        return per_column
    present = relax.op.astype(relax.op.greater(per_column, relax.const(0, "float32")), "float32")
    return relax.op.multiply(present, relax.const(_idf_weights(columns, weights, width)))


def convert_tfidf_vectorizer(bb, inputs, attrs, opset, stock):  # noqa: ARG001 - no TVM converter to fall back on
    """TfIdfVectorizer of an int32/int64 [C] or [N, C] input with a static C: float32 [columns] or [N, columns]."""
    relax = relax_api()
    mode = string_attr(attrs, "mode", "")
    if mode not in MODES:
        raise ValueError(f"TfIdfVectorizer mode {mode!r}, not one of {', '.join(MODES)}")
    min_n, max_n = attrs["min_gram_length"], attrs["max_gram_length"]
    if not 1 <= min_n <= max_n:
        raise ValueError(f"TfIdfVectorizer gram lengths {min_n}..{max_n}")
    indexes = np.asarray(attrs["ngram_indexes"], np.int64)
    weights = np.asarray(attrs.get("weights", np.ones(len(indexes))), np.float32)
    if len(weights) != len(indexes):
        raise ValueError(f"TfIdfVectorizer has {len(weights)} weights for {len(indexes)} ngram_indexes")
    width = int(indexes.max()) + 1
    rows, batch, length = _rows(inputs[0])
    counts, ids = _counts(rows, length, _pool(attrs, min_n, max_n, len(indexes)), attrs.get("max_skip_count", 0))
    if counts is None:  # no pool n-gram fits in a row
        y = relax.op.zeros(relax.ShapeExpr([batch, width]), "float32")
    else:
        y = _weigh(counts, mode, indexes[ids], weights[ids], width)
    return y if inputs[0].ty.ndim == 2 else relax.op.reshape(y, [width])

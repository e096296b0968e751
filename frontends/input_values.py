"""Inputs whose values set shapes: the axes of a ReduceSum, the scales of a Resize, the starts of a Slice.

ONNX lets such operands be graph inputs. onnxruntime reads them at run time; TVM's importer needs them as
constants (it refuses some, and gets Slice's wrong in the build). So xcomp asks for their values at compile time,
as TensorRT asks for shape tensors in its build profiles: `--input-value axes=1` (Python:
`input_values={"axes": [1]}`) turns the input into a constant, and the compiled module checks, when called with
that input, that the value is the one it was compiled for.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from xcomp.errors import InputError, UnsupportedOpError

_REDUCE_OPS = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
               "ReduceProd", "ReduceSum", "ReduceSumSquare")
# op type -> positions of inputs that TVM's importer needs as constants (a run-time value is refused, or was
# silently replaced: NonMaxSuppression took 0 boxes). Those it takes at run time are RUNTIME_SLOTS.
VALUE_SLOTS = {
    **{op: (1,) for op in _REDUCE_OPS},
    "Reshape": (1,), "Pad": (1, 3), "Slice": (1, 2, 3, 4), "Split": (1,), "Resize": (1, 2, 3), "Upsample": (1,),
    "TopK": (1,), "OneHot": (1,), "CumSum": (1,), "CumProd": (1,), "CenterCropPad": (1,), "Col2Im": (1, 2),
    "AffineGrid": (1,),
    "NonMaxSuppression": (2, 3, 4), "SequenceAt": (1,), "SequenceErase": (1,), "SequenceInsert": (2,),
    "DFT": (1, 2), "STFT": (1, 3), "Loop": (0, 1),  # a Loop is unrolled only when its count is constant
}
# Shape-setting operands TVM takes at run time when they are graph inputs; computed ones can still fail to import,
# and then the inputs they are computed from are asked for too.
RUNTIME_SLOTS = {"Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2), "Squeeze": (1,),
                 "Unsqueeze": (1,), "Trilu": (1,)}


class InputValuesRequired(UnsupportedOpError):
    """Graph inputs that set shapes and need their values at compile time. `inputs`: {input name: [node
    description, ...]}. An UnsupportedOpError, so it lists the nodes like one, but the message says how to fix it."""

    def __init__(self, inputs: dict, nodes: list):
        super().__init__(nodes)
        self.inputs = dict(inputs)
        uses = "; ".join(f"input {name!r} is the {' and the '.join(where)}" for name, where in self.inputs.items())
        flags = " ".join(f"--input-value {name}=..." for name in self.inputs)
        self.args = (f"{uses}: xcomp needs these values at compile time (they set shapes). Give them: {flags} "
                     f"(Python: input_values={{name: array}})",)


def require_input_values(proto, open_inputs, opset, through_computations=False) -> None:
    """Raise InputValuesRequired when a graph input without a value (`open_inputs`: their TensorSpecs) feeds a
    VALUE_SLOTS position of a node of the main graph: directly, or with `through_computations` (after an import
    failed) also a RUNTIME_SLOTS position, and through the ops that compute that operand from it. That trace
    does not pass Shape or Size (they read a shape, not values), nor into If branches, and counts only inputs
    of rank <= 1: a model's data is not a shape."""
    candidates = {s.name for s in open_inputs if not through_computations or len(s.shape) <= 1}
    producers = {out: node for node in proto.graph.node for out in node.output}
    needed, nodes = {}, []
    for node in proto.graph.node:
        slots = VALUE_SLOTS.get(node.op_type, ()) + (RUNTIME_SLOTS.get(node.op_type, ()) if through_computations
                                                      else ())
        for position in slots if node.domain in ("", "ai.onnx") else ():
            operand = node.input[position] if position < len(node.input) else ""
            sources = _sources(operand, producers, candidates) if through_computations else \
                {operand} & candidates
            for source in sorted(sources):
                label = f"{_operand_name(node.op_type, opset, position)} of {node.op_type} node " \
                        f"{node.name or '<unnamed>'}" + ("" if source == operand else " (computed from it)")
                needed.setdefault(source, []).append(label)
                if (node.name, node.op_type, opset) not in nodes:
                    nodes.append((node.name, node.op_type, opset))
    if needed:
        raise InputValuesRequired(needed, nodes)


def _sources(name, producers, candidates) -> set:
    """The `candidates` that the value of tensor `name` is computed from."""
    found, stack, seen = set(), [name], set()
    while stack:
        current = stack.pop()
        if not current or current in seen:
            continue
        seen.add(current)
        if current in candidates:
            found.add(current)
        elif current in producers and producers[current].op_type not in ("Shape", "Size"):
            stack.extend(producers[current].input)
    return found


def _operand_name(op_type, opset, position) -> str:
    """The ONNX schema's name of an op's input ('axes', 'scales'), else 'input N'."""
    import onnx

    try:
        return repr(onnx.defs.get_schema(op_type, opset).inputs[position].name)
    except Exception:  # an op or opset the installed onnx does not describe
        return f"input {position}"


def bind_input_values(proto, specs, values: dict, label) -> list:
    """Give each input named in `values` an initializer holding that value (proto changed in place). `specs`:
    the graph inputs' TensorSpecs. Returns the bound inputs' TensorSpecs, each with its `value`."""
    from onnx import numpy_helper

    by_name = {s.name: s for s in specs}
    bound = []
    for name, given in values.items():
        if name not in by_name:
            raise InputError(f"{label}: --input-value names {name!r}, but the model's inputs are {sorted(by_name)}")
        spec = by_name[name]
        array = _as_input_array(spec, given, label)
        proto.graph.initializer.append(numpy_helper.from_array(array, name))
        bound.append(dataclasses.replace(spec, shape=tuple(array.shape), value=tuple(array.ravel().tolist())))
    return bound  # (the graph input stays: an initializer of the same name gives it its value, as in IR < 4)


def _as_input_array(spec, given, label) -> np.ndarray:
    """`given` (a list, a scalar or an array) as an array of the input's dtype and shape."""
    try:
        raw = np.asarray(given)
        array = raw.astype(spec.dtype)
    except (TypeError, ValueError):
        raise InputError(f"{label}: --input-value {spec.name}: {given!r} is not a {spec.dtype} array") from None
    if array.dtype.kind in "iu" and not np.array_equal(array, raw):
        raise InputError(f"{label}: --input-value {spec.name}: the input is {spec.dtype}, got {raw.tolist()}")
    if all(isinstance(d, int) for d in spec.shape):
        if array.size != int(np.prod(spec.shape)):
            raise InputError(f"{label}: --input-value {spec.name}: the input has shape {list(spec.shape)} "
                             f"({int(np.prod(spec.shape))} values), got {array.size} value(s)")
        return array.reshape(spec.shape)
    if array.ndim != len(spec.shape):
        array = array.reshape(-1) if len(spec.shape) == 1 else array
    if array.ndim != len(spec.shape) or any(isinstance(d, int) and d != n for d, n in zip(spec.shape, array.shape)):
        raise InputError(f"{label}: --input-value {spec.name}: the input has shape {list(spec.shape)}, "
                         f"got an array of shape {list(array.shape)}")
    return array

"""ONNX frontend: load and validate a model, bind input shapes, import it into a Relax IRModule.

Input dims the user does not bind stay symbolic: each dim name (`batch`, `seq`; `x_dim0` for an unnamed dim)
becomes one tir.Var shared by every input that uses it, and one compiled module serves every size of it.

Every failure becomes an XcompError naming the file, node or op at fault:
- a missing / unreadable / truncated / non-ONNX file, or one the ONNX checker rejects -> ModelLoadError;
- external data whose path escapes the model's folder -> ModelLoadError;
- ops the importer cannot take -> one UnsupportedOpError listing every such node at once;
- a Scan, Loop or SequenceMap whose count is not static (frontends/control_flow.py unrolls the others) ->
  UnsupportedOpError naming each and saying why;
- a converter that fails on a node -> UnsupportedOpError naming that node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import os
import re
import warnings
from collections import Counter

import numpy as np

from xcomp.errors import (RUNTIME_CHECK_TAG, InputError, ModelLoadError, UnsupportedOpError, UserError, XcompError,
                          describe)
from xcomp.frontends.control_flow import (DEFAULT_DOMAINS, UNROLLED_OPS, all_graphs, evaluate, refuse_control_flow,
                                          unroll_control_flow)
from xcomp.frontends.input_values import bind_input_values, require_input_values
from xcomp.frontends.opsets import MAX_OPSET, MIN_OPSET, refusal

# No tensor of a model we can run is bigger than this (256 GiB); a larger one is a corrupt or hostile file.
MAX_TENSOR_BYTES = 1 << 38
# Ops whose `pads` must be non-negative (ONNX spec); Pad itself may crop with negative pads.
_NON_NEGATIVE_PADS = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "AveragePool", "MaxPool", "LpPool",
                      "MaxUnpool", "DeformConv"}


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A named tensor in a model's signature."""

    name: str
    shape: tuple  # ints; a str for a dimension that is still symbolic
    dtype: str
    # an input that indexes a Gather: (lowest, highest) value it may hold and the node it indexes; compiled code
    # does not bounds-check, so the module checks the values before running
    index_range: tuple | None = None
    # an input fixed at compile time (frontends/input_values.py): its values, flattened
    value: tuple | None = None

    def to_dict(self):
        d = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.index_range is not None:
            d["index_range"] = list(self.index_range)
        if self.value is not None:
            d["value"] = list(self.value)
        return d

    @classmethod
    def from_dict(cls, d):
        index_range, value = d.get("index_range"), d.get("value")
        return cls(d["name"], tuple(d["shape"]), d["dtype"], tuple(index_range) if index_range else None,
                   tuple(value) if value is not None else None)

    @functools.cached_property
    def numpy_dtype(self) -> np.dtype:
        """`dtype` as numpy's (bfloat16 and the float8s from ml_dtypes, which TVM depends on); cached, since a
        call checks every input's dtype and the lookup by name costs microseconds."""
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, self.dtype, self.dtype))

    def value_array(self) -> np.ndarray:
        """The value of an input fixed at compile time."""
        return np.asarray(self.value, dtype=self.dtype).reshape(self.shape)

    def check_value(self, array) -> None:
        """InputError unless `array` is the value this input was fixed to at compile time."""
        expected = self.value_array()
        if array.shape != expected.shape or not np.array_equal(array, expected):
            raise InputError(
                f"input {self.name!r} was fixed to {expected.tolist()} at compile time (--input-value), got "
                f"{array.tolist() if array.size <= 16 else f'an array of shape {list(array.shape)}'}; compile "
                f"again with --input-value {self.name}=... for other values"
            )

    def check_indices(self, array) -> None:
        """InputError when `array` holds an index outside `index_range`."""
        if self.index_range is None or not array.size:
            return
        low, high, node = self.index_range
        outside = (array < low) | (array > high)
        if outside.any():
            position = tuple(int(i) for i in np.argwhere(outside)[0])
            raise InputError(
                f"input {self.name!r}: value {array[position]} at {list(position)} is out of range for {node}: "
                f"indices must lie in [{low}, {high}]"
            )


@dataclasses.dataclass
class ImportedModel:
    """An ONNX model imported into Relax, with its signature."""

    mod: object  # tvm.IRModule with a Relax "main"
    inputs: list  # [TensorSpec]
    outputs: list  # [TensorSpec]
    opset: int
    name: str
    proto: object  # the (shape-bound, rewritten) onnx.ModelProto
    bound_inputs: list = dataclasses.field(default_factory=list)  # [TensorSpec] fixed by input_values


def _onnx():
    import onnx

    return onnx


# -- loading ------------------------------------------------------------------------------------------------


def _read_proto(model):
    """ModelProto from a path, bytes or a ModelProto; returns (proto, folder for external data, label)."""
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        return model, None, "<ModelProto>"
    if isinstance(model, (bytes, bytearray, memoryview)):
        data, folder, label = bytes(model), None, "<bytes>"
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise ModelLoadError(f"{path}: no such file")
        if os.path.isdir(path):
            raise ModelLoadError(f"{path}: is a directory, expected an .onnx file")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as err:
            raise ModelLoadError(f"{path}: cannot read ({err.strerror})") from None
        folder, label = os.path.dirname(os.path.abspath(path)), path
    else:
        raise UserError(f"model must be a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    if not data:
        raise ModelLoadError(f"{label}: empty file, not an ONNX model")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError and friends
        raise ModelLoadError(f"{label}: not a valid ONNX model (protobuf parse failed: {err})") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelLoadError(f"{label}: not an ONNX model (no graph found in the file)")
    return proto, folder, label


def _stored_tensors(graph):
    """Every tensor a model stores: initializers and node attributes (Constant's value) of every graph."""
    for g in all_graphs(graph):
        yield from g.initializer
        for node in g.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors


def _external_tensors(graph):
    """Every stored tensor (`_stored_tensors`) whose data is in another file."""
    external = _onnx().TensorProto.EXTERNAL
    return (t for t in _stored_tensors(graph) if t.data_location == external)


def _load_external_data(proto, folder, label):
    """Load external tensors, refusing any location that resolves outside the model's folder."""
    onnx = _onnx()
    tensors = list(_external_tensors(proto.graph))
    if not tensors:
        return
    if folder is None:
        raise ModelLoadError(
            f"{label}: the model keeps weights in external files; load it from a path so they can be found"
        )
    root = os.path.realpath(folder)
    for t in tensors:
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        full = os.path.realpath(os.path.join(root, location))
        if not location or os.path.isabs(location) or os.path.commonpath([root, full]) != root:
            raise ModelLoadError(
                f"{label}: initializer {t.name!r} points at external data {location!r} outside the model's "
                f"folder {root}; refusing to read it"
            )
        if not os.path.isfile(full):
            raise ModelLoadError(f"{label}: external data file {location!r} for initializer {t.name!r} is missing")
    try:
        onnx.external_data_helper.load_external_data_for_model(proto, root)
    except Exception as err:
        raise ModelLoadError(f"{label}: cannot load external data: {err}") from None


def _model_opset(proto, label) -> int | None:
    """The default-domain opset; None when the model uses only other domains (then every node is unsupported)."""
    for entry in proto.opset_import:
        if entry.domain in DEFAULT_DOMAINS:
            return entry.version
    if not proto.opset_import:  # very old models: opset 1
        return 1
    if not proto.graph.node:
        raise ModelLoadError(f"{label}: the model imports no default (ai.onnx) opset and has no nodes")
    return None


def _check(proto, label):
    onnx = _onnx()
    try:
        onnx.checker.check_model(proto)
    except Exception as err:
        first = describe(err, first=True)
        raise ModelLoadError(f"{label}: invalid ONNX model: {first}") from None


# -- signature and shapes -------------------------------------------------------------------------------------


def _dtype_of(elem_type) -> str:
    onnx = _onnx()
    return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))


def _value_spec(value) -> TensorSpec:
    ttype = value.type.tensor_type
    dims = []
    for i, d in enumerate(ttype.shape.dim):
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            # "?" is ONNX for "unknown", not a name: two "?" dims need not agree
            dims.append(d.dim_param if d.dim_param not in ("", "?") else f"{value.name}_dim{i}")
    return TensorSpec(value.name, tuple(dims), _dtype_of(ttype.elem_type) if ttype.elem_type else "float32")


def _static_shapes(proto) -> dict:
    """{tensor name: shape} for initializers and every value whose dims shape inference fixed."""
    shapes = {t.name: tuple(t.dims) for t in proto.graph.initializer}
    for value in [*proto.graph.input, *proto.graph.value_info]:
        dims = value.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes.setdefault(value.name, tuple(d.dim_value for d in dims))
    return shapes


def _host_checked_gathers(proto, inputs):
    """(node, axis size, axis) for each Gather whose indices are directly one of `inputs` (the graph's
    TensorSpecs) and whose axis is static: the module checks those indices before running."""
    inputs = {spec.name for spec in inputs}
    shapes = _static_shapes(proto)
    for node in proto.graph.node:
        if node.op_type != "Gather" or len(node.input) < 2 or node.input[1] not in inputs:
            continue
        shape = shapes.get(node.input[0])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if shape is None or not -len(shape) <= axis < len(shape):
            continue
        yield node, shape[axis], axis


def index_ranges(gathers) -> dict:
    """{input name: (low, high, node)} for the inputs of `gathers` (from _host_checked_gathers): the values of
    each must lie in [-size, size - 1] (onnxruntime rejects others; our compiled code would read out of bounds)."""
    ranges = {}
    for node, size, axis in gathers:
        low, high, _ = ranges.get(node.input[1], (-size, size - 1, None))
        ranges[node.input[1]] = (max(low, -size), min(high, size - 1),
                                 f"Gather node {node.name or node.output[0]!r} ({size} entries on axis {axis})")
    return ranges


def graph_inputs(proto) -> list:
    """The model's real inputs (graph inputs that are not initializers)."""
    inits = {t.name for t in proto.graph.initializer}
    return [_value_spec(v) for v in proto.graph.input if v.name not in inits]


def _bind_input_shapes(proto, input_shapes, label):
    """Fix the given inputs' dims from user shapes (checked against the model). Every other symbolic dim stays
    symbolic; an unnamed one gets the name its TensorSpec shows (`x_dim0`), so shape inference, the importer and
    the module's signature all use one name per dim."""
    inputs = graph_inputs(proto)
    by_name = {s.name: s for s in inputs}
    input_shapes = dict(input_shapes or {})
    for name in input_shapes:
        if name not in by_name:
            raise InputError(f"{label}: --input-shape names {name!r}, but the model's inputs are {sorted(by_name)}")
    for value in proto.graph.input:
        if value.name not in by_name:
            continue
        spec = by_name[value.name]
        given = input_shapes.get(value.name)
        dims = value.type.tensor_type.shape.dim
        if given is None:
            for d, name in zip(dims, spec.shape):
                if isinstance(name, str):
                    d.dim_param = name
            continue
        given = tuple(int(x) for x in given)
        if len(given) != len(spec.shape):
            raise InputError(
                f"{label}: input {value.name!r} has rank {len(spec.shape)} {list(spec.shape)}, "
                f"but the given shape {list(given)} has rank {len(given)}"
            )
        for i, (want, got) in enumerate(zip(spec.shape, given)):
            if isinstance(want, int) and want != got:
                raise InputError(
                    f"{label}: input {value.name!r} dim {i} is fixed to {want} in the model, got {got}"
                )
            if got <= 0:
                raise InputError(f"{label}: input {value.name!r} dim {i} must be positive, got {got}")
            dims[i].Clear()
            dims[i].dim_value = got


def symbolic_dims(specs) -> dict:
    """{dim name: [(input name, axis), ...]} for every symbolic dim of `specs`, in first-use order."""
    dims = {}
    for spec in specs:
        for axis, d in enumerate(spec.shape):
            if isinstance(d, str):
                dims.setdefault(d, []).append((spec.name, axis))
    return dims


def specialize_hint(specs) -> str:
    """How to make every symbolic dim static: the --input-shape flags (size 1 for each symbolic dim)."""
    flags = []
    for spec in specs:
        if any(isinstance(d, str) for d in spec.shape):
            flags.append(f"--input-shape {spec.name}=" + ",".join(str(d) if isinstance(d, int) else "1"
                                                                   for d in spec.shape))
    return " ".join(flags) + " (Python: input_shapes={name: shape})"


def _relax_shapes(specs) -> dict:
    """{input name: [int | tir.Var]} for the importer: one int64 tir.Var per symbolic dim name, shared by every
    input that uses it (that sharing is what lets Relax prove, e.g., that two `batch` dims add up)."""
    from tvm import tirx

    symbols = {name: tirx.Var(re.sub(r"[^0-9A-Za-z_]", "_", name), "int64") for name in symbolic_dims(specs)}
    return {s.name: [symbols[d] if isinstance(d, str) else d for d in s.shape] for s in specs}


# -- support checks and rewrites ---------------------------------------------------------------------------


def _convert_map():
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    return _get_convert_map()


def _all_nodes(graph):
    return (node for g in all_graphs(graph) for node in g.node)


def unsupported_nodes(proto, opset):
    """[(node name, op type, opset)] for every node the importer has no converter for (opset None: the
    model has no default domain, so only other-domain nodes), or whose op version at `opset` is refused
    (frontends/opsets.py). Scan, Loop and SequenceMap pass here: they are unrolled when their count is static,
    refused later (refuse_control_flow) when not."""
    return [node for node, _ in _unsupported(proto, opset)]


def _unsupported(proto, opset):
    """[((node name, op type, opset), reason or None)] for unsupported_nodes."""
    from xcomp.frontends.converters import CONVERTERS

    supported = set(_convert_map()) | set(CONVERTERS) | {"Constant", "If", *UNROLLED_OPS}
    bad = []
    for node in _all_nodes(proto.graph):
        if node.domain not in DEFAULT_DOMAINS:
            bad.append(((node.name, f"{node.domain}.{node.op_type}", opset), None))
        elif (reason := opset is not None and refusal(node.op_type, opset)) or node.op_type not in supported:
            bad.append(((node.name, node.op_type, opset), reason or None))
    return bad


def _refuse_non_tensor_values(proto, opset):
    """A module takes and returns numeric tensors: a graph input or output of sequence, optional or string type
    is refused, naming the nodes that read or write it (before, a sequence output came back flattened into
    tensors, and a string input failed as "unknown dtype `object`")."""
    odd, nodes = [], []
    for value, kind in [(v, "input") for v in proto.graph.input] + [(v, "output") for v in proto.graph.output]:
        which = value.type.WhichOneof("value")
        if which == "tensor_type" and value.type.tensor_type.elem_type == _onnx().TensorProto.STRING:
            which = "string_tensor_type"
        if which not in (None, "tensor_type"):
            kind_name = which.replace("_type", "").replace("_", " ")
            odd.append(f"{kind} {value.name!r} is {'an' if kind_name[0] in 'aeiou' else 'a'} {kind_name}")
            nodes += [(n.name, n.op_type, opset) for n in proto.graph.node
                      if value.name in (n.input if kind == "input" else n.output)
                      and (n.name, n.op_type, opset) not in nodes]
    if odd:
        error = UnsupportedOpError(nodes)
        error.args = ("; ".join(odd) + f": xcomp modules take and return numeric tensors only ({error})",)
        raise error


def op_histogram(proto) -> Counter:
    return Counter(
        n.op_type if n.domain in DEFAULT_DOMAINS else f"{n.domain}.{n.op_type}" for n in _all_nodes(proto.graph)
    )


def _check_attributes(proto, label):
    """Attribute values the ONNX spec forbids and the checker lets through."""
    for node in _all_nodes(proto.graph):
        if node.op_type in _NON_NEGATIVE_PADS:
            for attr in node.attribute:
                if attr.name == "pads" and any(p < 0 for p in attr.ints):
                    raise ModelLoadError(
                        f"{label}: node {node.name or '<unnamed>'} ({node.op_type}) has negative pads "
                        f"{list(attr.ints)}; the ONNX spec requires pads >= 0"
                    )


def _check_stored_tensors(proto, label):
    """Each stored tensor holds as many values as its dims declare: the checker lets more through (then numpy
    fails to reshape them while folding constants) and a data type no numpy dtype stands for."""
    onnx = _onnx()
    proto_types = onnx.TensorProto
    skipped = {proto_types.STRING, proto_types.UNDEFINED, proto_types.INT4, proto_types.UINT4, proto_types.INT2,
               proto_types.UINT2, proto_types.FLOAT4E2M1, proto_types.FLOAT6E2M3, proto_types.FLOAT6E3M2}
    for tensor in _stored_tensors(proto.graph):
        if tensor.data_location == proto_types.EXTERNAL or tensor.data_type in skipped:
            continue  # external data is checked where it is read; sub-byte types pack their values
        name = tensor.name or "<unnamed>"
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
            field = onnx.helper.tensor_dtype_to_field(tensor.data_type)
        except (KeyError, ValueError, TypeError):
            raise ModelLoadError(f"{label}: tensor {name!r} has data type {tensor.data_type}, which ONNX does not "
                                 "define") from None
        count = int(np.prod(list(tensor.dims), dtype=np.int64))
        if tensor.HasField("raw_data"):
            stored, declared, unit = len(tensor.raw_data), count * dtype.itemsize, "bytes"
        else:
            stored, unit = len(getattr(tensor, field)), "values"
            declared = count * (2 if dtype.kind == "c" else 1)  # complex: real and imaginary parts
        if stored != declared:
            raise ModelLoadError(f"{label}: tensor {name!r} declares shape {list(tensor.dims)} ({declared} {unit} "
                                 f"of {dtype}) but stores {stored} {unit}")


def _check_tensor_sizes(proto, label):
    """Refuse absurd static shapes (e.g. 2^40 x 2^20) before anything tries to allocate them."""
    values = list(proto.graph.input) + list(proto.graph.output) + list(proto.graph.value_info)
    for value in values:
        spec = _value_spec(value)
        dims = [d for d in spec.shape if isinstance(d, int)]
        if any(d < 0 for d in dims):
            raise ModelLoadError(f"{label}: tensor {spec.name!r} has a negative dimension {list(spec.shape)}")
        size = np.dtype(spec.dtype).itemsize
        for d in dims:
            size *= d
        if size > MAX_TENSOR_BYTES:
            raise ModelLoadError(
                f"{label}: tensor {spec.name!r} with shape {list(spec.shape)} would take {size / 2**30:.3g} GiB, "
                f"over the {MAX_TENSOR_BYTES / 2**30:.0f} GiB limit for any one tensor"
            )


def _rewrite_sum_to_add(graph):
    """ONNX Sum becomes a chain of Add: TVM imports Sum as stack+reduce, which fuses and vectorizes badly."""
    onnx = _onnx()
    new_nodes = []
    for node in graph.node:
        if node.op_type == "Sum" and node.domain in DEFAULT_DOMAINS and len(node.input) >= 2:
            acc = node.input[0]
            for i, operand in enumerate(node.input[1:], start=1):
                last = i == len(node.input) - 1
                out = node.output[0] if last else f"{node.output[0]}__sum{i}"
                new_nodes.append(onnx.helper.make_node("Add", [acc, operand], [out], name=f"{node.name}__add{i}"))
                acc = out
        elif node.op_type == "Sum" and len(node.input) == 1:
            new_nodes.append(onnx.helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name))
        else:
            new_nodes.append(node)
    del graph.node[:]
    graph.node.extend(new_nodes)


_CONSTANT_ATTRS = {"value_float": ("f", "float32", False), "value_floats": ("floats", "float32", True),
                   "value_int": ("i", "int64", False), "value_ints": ("ints", "int64", True)}


def _rewrite_constant_attributes(proto):
    """Constant's value_float(s) / value_int(s) become its `value` tensor: TVM's importer reads only that one
    (it said "no value in Constant"; opset 12+ exporters, and ONNX's own function expansions, write the others)."""
    onnx = _onnx()
    for node in _all_nodes(proto.graph):
        if node.op_type != "Constant" or node.domain not in DEFAULT_DOMAINS:
            continue
        for attr in list(node.attribute):
            if attr.name in _CONSTANT_ATTRS:
                field, dtype, is_list = _CONSTANT_ATTRS[attr.name]
                value = np.array(list(getattr(attr, field)) if is_list else getattr(attr, field), dtype=dtype)
                node.attribute.remove(attr)
                node.attribute.append(onnx.helper.make_attribute("value", onnx.numpy_helper.from_array(value)))


def _fold_static_shapes(proto) -> int:
    """Shape and Size of a tensor whose dims are all static become Constants. TVM's importer carries Shape as a
    shape expression that most ops refuse ("cannot handle ShapeExpr inputs": Size, Sub, ... in the expanded
    LayerNormalization that ONNX's function bodies and some exporters write); as constants, the whole shape
    computation folds. Shapes with a symbolic dim stay shape expressions. Returns how many were folded."""
    onnx = _onnx()
    shapes = _static_shapes(proto)
    folded = 0
    for node in proto.graph.node:
        if node.op_type not in ("Shape", "Size") or node.domain not in DEFAULT_DOMAINS or \
                node.input[0] not in shapes:
            continue
        shape = shapes[node.input[0]]
        if node.op_type == "Shape":  # start/end (opset 15) clamp as Python slicing does
            attrs = {a.name: a.i for a in node.attribute}
            value = np.array(shape[attrs.get("start", 0):attrs.get("end", len(shape))], np.int64)
        else:
            value = np.array(int(np.prod(shape, dtype=np.int64)), np.int64)
        node.CopyFrom(onnx.helper.make_node("Constant", [], [node.output[0]], name=node.name,
                                            value=onnx.numpy_helper.from_array(value)))
        folded += 1
    return folded


# Ops never folded: their results are not a function of their inputs, or are not tensors.
_NOT_FOLDABLE = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial",
                 "If", "Loop", "Scan", "SequenceMap", "Optional", "OptionalGetElement", "OptionalHasElement"}
_FOLD_MAX_ELEMENTS = 1 << 16  # shape arithmetic, not weights: a bigger result stays a computation
_FOLD_ROUNDS = 8


def _fold_constant_nodes(proto) -> int:
    """Evaluate (onnx.reference) every node of the main graph whose inputs are all constants and small, and make
    each of its outputs a Constant: a shape computed from constants (Shape folded above -> Slice -> Concat ->
    Reshape, or Split of a shape -> Concat) must be a constant for TVM's Reshape, which refuses a computed tensor.
    Returns how many nodes were folded."""
    onnx = _onnx()
    values = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer
              if np.prod(t.dims, dtype=np.int64) <= _FOLD_MAX_ELEMENTS}
    nodes, folded = [], 0
    for node in proto.graph.node:
        constants = _constant_outputs(node, values, proto.opset_import)
        folded += constants is not None
        for kept in constants or [node]:
            nodes.append(kept)
            value = _small_constant(kept)
            if value is not None:
                values[kept.output[0]] = value
    if folded:
        del proto.graph.node[:]
        proto.graph.node.extend(nodes)
    return folded


def _small_constant(node):
    """The value of a Constant node, when small enough to fold with; else None."""
    attr = next((a for a in node.attribute if a.name == "value"), None)
    if node.op_type != "Constant" or node.domain not in DEFAULT_DOMAINS or attr is None or \
            np.prod(attr.t.dims, dtype=np.int64) > _FOLD_MAX_ELEMENTS:
        return None
    return _onnx().numpy_helper.to_array(attr.t)


def _constant_outputs(node, values, opsets):
    """A Constant node for each output of `node` computed from the constants `values`; None when it cannot or
    should not be folded (a Constant already, an op the reference cannot evaluate, a big result)."""
    onnx = _onnx()
    inputs = [name for name in node.input if name]
    if node.domain not in DEFAULT_DOMAINS or node.op_type in _NOT_FOLDABLE or node.op_type == "Constant" or \
            not inputs or not all(name in values for name in inputs) or \
            any(a.HasField("g") or a.graphs for a in node.attribute):
        return None
    outputs = [name for name in node.output if name]
    try:
        results = evaluate([node], {name: values[name] for name in inputs}, outputs, opsets)
        if any(result.size > _FOLD_MAX_ELEMENTS for result in results):
            return None
        return [onnx.helper.make_node("Constant", [], [name], name=node.name,
                                      value=onnx.numpy_helper.from_array(result))
                for name, result in zip(outputs, results)]
    except Exception:  # an op (or a result type) the reference cannot evaluate: TVM converts it as it is
        return None


# -- import -------------------------------------------------------------------------------------------------


def _importer_class():
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    from xcomp.frontends.converters import CONVERTERS, NodeContext

    class NamingImporter(ONNXGraphImporter):
        """The stock importer, but our converters (frontends/converters.py) come first, with a NodeContext, a
        converter failure names the node and op, and input names become C identifiers (they end up as kernel
        parameter names: `gpu_0/data_0` breaks CUDA code). `host_checked`: the first outputs of the Gather nodes
        whose indices the module checks before running. The run-time checks converters ask for collect in
        `runtime_checks` ([(condition var, [format arg vars], message)]); with_runtime_checks adds them to main."""

        def __init__(self, *args, host_checked=frozenset(), **kwargs):
            super().__init__(*args, **kwargs)
            self._host_checked = frozenset(host_checked)
            self._node = None  # the top-level node being converted
            self._branch_depth = 0  # > 0 while converting an If branch
            self.runtime_checks = []

        def _sanitize_name(self, name):
            return super()._sanitize_name(re.sub(r"[^0-9A-Za-z_]", "_", name) if name else name)

        def _check_for_unsupported_ops(self, graph):
            """Done already: load_onnx's unsupported_nodes() counts CONVERTERS too, over every subgraph."""

        def _parse_value_proto(self, value_proto):
            # _construct_nodes names each top-level node through here just before converting it
            if isinstance(value_proto, _onnx().NodeProto):
                self._node = value_proto
            return super()._parse_value_proto(value_proto)

        def _convert_subgraph(self, bb, graph):
            self._branch_depth += 1
            try:
                return super()._convert_subgraph(bb, graph)
            finally:
                self._branch_depth -= 1

        def _runtime_check(self, condition, format_args, message):
            """Bind the condition and format args where main can see them after the graph's dataflow block."""
            emit = self.bb.emit_output if self.bb.current_block_is_dataflow() else self.bb.emit
            condition, *format_args = [emit(expr) for expr in [condition, *format_args]]
            self.runtime_checks.append((condition, format_args, message))

        def _context(self, attrs):
            node = self._node
            if self._branch_depth or node is None or node.name != attrs.get("tvm_custom", {}).get("name"):
                return None
            return NodeContext(node=node, label=node.name or (node.output[0] if node.output else "<unnamed>"),
                               runtime_check=self._runtime_check,
                               indices_checked_on_host=bool(node.output) and node.output[0] in self._host_checked)

        def _convert_operator(self, op_name, inputs, attrs, opset):
            try:
                stock = super()._convert_operator
                if op_name in CONVERTERS:
                    context = self._context(attrs)
                    if context is not None:
                        attrs["tvm_custom"]["xcomp"] = context
                    return self.bb.normalize(CONVERTERS[op_name](
                        self.bb, inputs, attrs, opset,
                        lambda new_inputs=None: stock(op_name, type(inputs)(new_inputs or inputs), attrs, opset)))
                return stock(op_name, inputs, attrs, opset)
            except UnsupportedOpError:
                raise
            except Exception as err:
                node = attrs.get("tvm_custom", {}).get("name", "")
                reason = describe(err)
                error = UnsupportedOpError([(node, op_name, opset)])
                error.args = (f"cannot import node {node or '<unnamed>'} ({op_name}, opset {opset}): {reason}",)
                raise error from None

    return NamingImporter


def with_runtime_checks(mod, checks):
    """`mod` with an assert for each (condition, format args, message) appended to main, after its dataflow
    block (impure ops cannot sit inside one): main then raises (an AssertionError whose message starts with
    RUNTIME_CHECK_TAG; Module turns it into InputError) when a condition is false. main becomes impure."""
    from tvm import relax

    if not checks:
        return mod
    func = mod["main"]
    builder = relax.BlockBuilder()
    bindings = []
    for condition, format_args, message in checks:
        call = builder.normalize(relax.op.assert_op(condition, format_args, RUNTIME_CHECK_TAG + message))
        # the assert runs only when the check fails: it is a Python callback that costs even when the condition
        # holds, where the VM's branch on a bool is free (docs/decisions/call-overhead.md)
        failed = relax.SeqExpr([relax.BindingBlock([relax.VarBinding(relax.Var("failed", call.ty), call)])],
                               relax.Tuple([]))
        check = builder.normalize(relax.If(condition, relax.SeqExpr([], relax.Tuple([])), failed))
        bindings.append(relax.VarBinding(relax.Var("index_check", check.ty), check))
    body = relax.SeqExpr([*func.body.blocks, relax.BindingBlock(bindings)], func.body.body)
    mod["main"] = relax.Function(func.params, body, func.ret_ty, is_pure=False, attrs=func.attrs)
    return mod


def _output_specs(mod, proto) -> list:
    from tvm import relax

    ret = mod["main"].ret_ty
    fields = ret.fields if isinstance(ret, relax.TupleType) else [ret]
    specs = []
    for value, sinfo in zip(proto.graph.output, fields):
        shape = tuple(int(d) if hasattr(d, "value") else str(d) for d in sinfo.shape.values) if sinfo.shape else ()
        specs.append(TensorSpec(value.name, shape, str(sinfo.dtype)))
    return specs


def _bind_and_infer(proto, input_shapes, label):
    """`proto` (changed in place) with the given input shapes bound, then shapes inferred, checked and rewritten
    for import."""
    _bind_input_shapes(proto, input_shapes, label)
    bound = _infer_shapes(proto, label)
    _check_attributes(bound, label)
    _check_tensor_sizes(bound, label)
    _rewrite_constant_attributes(bound)
    # A folded shape can make the shape a later Shape reads static, a folded trip count a Loop unrollable, an
    # unrolled body's nodes foldable: infer again after each round.
    for _ in range(_FOLD_ROUNDS):
        if not _fold_static_shapes(bound) + _fold_constant_nodes(bound) + unroll_control_flow(bound):
            break
        del bound.graph.value_info[:]
        bound = _infer_shapes(bound, label)
    _rewrite_sum_to_add(bound.graph)
    return bound


def _infer_shapes(proto, label):
    try:
        return _onnx().shape_inference.infer_shapes(proto, check_type=True, strict_mode=False, data_prop=True)
    except Exception as err:
        raise ModelLoadError(f"{label}: shape inference failed: {describe(err, first=True)}") from None


def _import(proto, opset, inputs, label, host_checked):
    """The Relax IRModule of a bound, inferred model; symbolic input dims become tir.Vars. `host_checked`: the
    first outputs of the Gathers whose indices the module checks before running (no run-time check for them)."""
    importer = _importer_class()(_relax_shapes(inputs), {s.name: s.dtype for s in inputs}, keep_params_in_input=False,
                                 host_checked=host_checked)
    # The stock importer prints and warns as it goes; keep the user's terminal clean.
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            return with_runtime_checks(importer.from_onnx(proto.graph, opset), importer.runtime_checks)
        except (UserError, MemoryError):
            raise
        except Exception as err:
            reason = describe(err)
            raise ModelLoadError(f"{label}: cannot import the model: {reason}") from None


def _describe_symbols(inputs) -> str:
    """Every symbolic dim where it is used: `input 'x' dim 0 (batch), input 'mask' dim 0 (batch)`."""
    return ", ".join(f"input {name!r} dim {axis} ({dim})" for dim, uses in symbolic_dims(inputs).items()
                     for name, axis in uses)


def load_onnx(model, input_shapes=None, input_values=None) -> ImportedModel:
    """Load, validate and import an ONNX model (path, bytes or ModelProto) into Relax. `input_values`: {input
    name: array} for inputs to fix at compile time (frontends/input_values.py)."""
    onnx = _onnx()
    proto, folder, label = _read_proto(model)
    proto_copy = onnx.ModelProto()
    proto_copy.CopyFrom(proto)
    proto = proto_copy
    _load_external_data(proto, folder, label)
    opset = _model_opset(proto, label)
    # Before the checker, which stops at the first op it does not know: the user gets every one at once.
    bad = _unsupported(proto, opset)
    if bad:
        reasons = [reason or "xcomp has no converter for it" for _, reason in bad]
        raise UnsupportedOpError([node for node, _ in bad], reasons if any(r for _, r in bad) else ())
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ModelLoadError(f"{label}: opset {opset} is outside the supported range {MIN_OPSET}..{MAX_OPSET}")
    _check(proto, label)
    _check_stored_tensors(proto, label)
    _refuse_non_tensor_values(proto, opset)
    fixed = bind_input_values(proto, graph_inputs(proto), dict(input_values or {}), label)
    bound = _bind_and_infer(proto, input_shapes, label)
    inputs = graph_inputs(bound)
    require_input_values(bound, inputs, opset)
    refuse_control_flow(bound, opset)
    gathers = list(_host_checked_gathers(bound, inputs))
    ranges = index_ranges(gathers)
    inputs = [dataclasses.replace(spec, index_range=ranges.get(spec.name)) for spec in inputs]
    try:
        mod = _import(bound, opset, inputs, label, {node.output[0] for node, _, _ in gathers})
    except XcompError as err:
        if isinstance(err, UnsupportedOpError):  # a shape computed from an input: say which value to give
            require_input_values(bound, inputs, opset, through_computations=True)
        if symbolic_dims(inputs):  # some converters need static shapes: say how to give them (same error class)
            err.args = (f"{err}; this was with {_describe_symbols(inputs)} kept symbolic: if the op needs them "
                        f"static, specialize them: {specialize_hint(inputs)}",)
        raise
    return ImportedModel(
        mod=mod,
        inputs=inputs,
        outputs=_output_specs(mod, bound),
        opset=opset,
        name=proto.graph.name or os.path.splitext(os.path.basename(label))[0],
        proto=bound,
        bound_inputs=fixed,
    )

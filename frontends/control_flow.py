"""Control flow whose count is known at import time, unrolled at the ONNX level.

TVM's Relax importer has no Scan, Loop or SequenceMap, and imports an If as a branch taken at run time. When the
count is static -- a Scan over a static dim, a Loop with a constant trip count whose condition stays true, a
SequenceMap over a sequence built in the graph, an If on a constant -- the node becomes its body's nodes, copied
once per iteration (once for an If) with every name the body defines renamed; outer-scope values the body reads
keep their names. Scan inputs are sliced with Gather at constant indices, scan outputs stacked with
Unsqueeze + Concat, loop-carried state threaded from one copy to the next.

A SequenceLength of such a sequence becomes a constant too: it is the trip count of ONNX's own expansion of
SequenceMap into a Loop.

Control flow nested in a body is copied as it is and unrolled in a later round, once shape inference has seen the
copy (frontends/onnx.py runs unroll_control_flow with its folding passes). Nodes that cannot be unrolled stay;
refuse_control_flow then names them and says why.
"""

from __future__ import annotations

import numpy as np

from xcomp.errors import UnsupportedOpError, describe

UNROLLED_OPS = ("Scan", "Loop", "SequenceMap")  # ops TVM cannot import: unrolled, or refused
# Nodes a model may grow to by unrolling (nested loops multiply): past that it is a model to run, not to unroll.
MAX_MODEL_NODES = 1 << 16
DEFAULT_DOMAINS = ("", "ai.onnx")  # the default ONNX domain, under both its names


class NotUnrollable(Exception):
    """Why a control-flow node cannot be unrolled (the message completes "cannot unroll it: ...")."""


# -- helpers ----------------------------------------------------------------------------------------------------


def _onnx():
    import onnx

    return onnx


def _attrs(node) -> dict:
    return {a.name: _onnx().helper.get_attribute_value(a) for a in node.attribute}


def _input(node, i) -> str:
    """The name of a node's i-th input; "" when it is omitted."""
    return node.input[i] if i < len(node.input) else ""


def _subgraphs(node) -> list:
    return [g for a in node.attribute for g in ([a.g] if a.HasField("g") else list(a.graphs))]


def all_graphs(graph):
    """`graph` and every graph nested in it."""
    yield graph
    for node in graph.node:
        for sub in _subgraphs(node):
            yield from all_graphs(sub)


def _defined_names(graph) -> list:
    """Every value name `graph` defines, its nested graphs included."""
    names = []
    for g in all_graphs(graph):
        names += [v.name for v in g.input] + [t.name for t in g.initializer]
        names += [out for node in g.node for out in node.output if out]
    return names


def evaluate(nodes, values: dict, outputs, opsets) -> list:
    """The `outputs` of `nodes` (in graph order) computed by onnx.reference from `values` ({name: array})."""
    onnx = _onnx()
    from onnx.reference import ReferenceEvaluator

    graph = onnx.helper.make_graph(list(nodes), "evaluate", [],
                                   [onnx.helper.make_empty_tensor_value_info(name) for name in outputs],
                                   [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in values.items()])
    evaluator = ReferenceEvaluator(onnx.helper.make_model(graph, opset_imports=list(opsets)))
    return [np.asarray(v) for v in evaluator.run(None, {})]


def _is_true(value) -> bool:
    return value is not None and value.size == 1 and bool(value.reshape(()))


class _Scope:
    """What import time knows of the values a graph sees: its own and those of the graphs around it."""

    def __init__(self, graph, parent=None):
        self.parent = parent
        self.tensors = {t.name: t for t in graph.initializer}  # TensorProtos, made arrays when asked for
        self.producers = {}
        for node in graph.node:
            self.producers.update((out, node) for out in node.output if out)
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if node.op_type == "Constant" and value is not None:
                self.tensors[node.output[0]] = value
        self.types = {v.name: v.type for v in [*graph.input, *graph.value_info, *graph.output]}

    def _find(self, table, name):
        scope = self
        while scope is not None:
            found = getattr(scope, table).get(name)
            if found is not None:
                return found
            scope = scope.parent
        return None

    def constant(self, name):
        """The value of `name` when it is an initializer or a Constant, else None."""
        tensor = self._find("tensors", name) if name else None
        return None if tensor is None else _onnx().numpy_helper.to_array(tensor)

    def producer(self, name):
        return self._find("producers", name)

    def shape(self, name):
        """(dim or None, ...) of a tensor; None when even its rank is unknown."""
        tensor = self._find("tensors", name)
        if tensor is not None:
            return tuple(tensor.dims)
        value_type = self._find("types", name)
        if value_type is None or not value_type.tensor_type.HasField("shape"):
            return None
        return tuple(d.dim_value if d.HasField("dim_value") else None for d in value_type.tensor_type.shape.dim)

    def is_sequence(self, name) -> bool:
        value_type = self._find("types", name)
        return value_type is not None and value_type.WhichOneof("value") == "sequence_type"

    def static_dim(self, name, axis, what) -> int:
        shape = self.shape(name)
        if shape is None or not -len(shape) <= axis < len(shape) or shape[axis] is None:
            raise NotUnrollable(f"{what} (dim {axis} of {name!r}) is not static; fix it with --input-shape")
        return shape[axis]


class _Pass:
    """One pass over a model: its opsets, the names it uses, the nodes it may still grow by."""

    def __init__(self, model):
        self.opsets = list(model.opset_import)
        self.opset = next((o.version for o in self.opsets if o.domain in DEFAULT_DOMAINS), 1)
        self.used = set()
        size = 0
        for g in all_graphs(model.graph):
            self.used.update(v.name for v in [*g.input, *g.output, *g.value_info, *g.initializer])
            self.used.update(name for node in g.node for name in [*node.input, *node.output])
            size += len(g.node)
        self.room = MAX_MODEL_NODES - size

    def fresh(self, base) -> str:
        """A value name not used yet."""
        name, n = base, 0
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name


class _Builder:
    """Emits the nodes and initializers that replace one control-flow node (kept aside until the whole node
    unrolled). Constants are initializers: a Constant node of opset < 9 holds floats only."""

    def __init__(self, unroll_pass, label):
        self.unroll_pass, self.opset, self.label = unroll_pass, unroll_pass.opset, label
        self.nodes, self.initializers = [], []
        self._constants = {}  # one initializer per value

    def node(self, op, inputs, out=None, **attrs) -> str:
        out = out or self.unroll_pass.fresh(f"{self.label}_{op.lower()}")
        self.nodes.append(_onnx().helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def constant(self, value) -> str:
        value = np.asarray(value)
        key = (value.dtype.str, value.shape, value.tobytes())
        if key not in self._constants:
            name = self.unroll_pass.fresh(f"{self.label}_constant")
            self.initializers.append(_onnx().numpy_helper.from_array(value, name))
            self._constants[key] = name
        return self._constants[key]

    def take(self, x, index, axis) -> str:
        """x[index] along `axis`, the axis dropped."""
        return self.node("Gather", [x, self.constant(np.int64(index))], axis=axis)

    def slice(self, x, start, end, axis) -> str:
        return self.node("Slice", [x, *(self.constant(np.array([v], np.int64)) for v in (start, end, axis))])

    def unsqueeze(self, x, axis, out=None) -> str:
        if self.opset >= 13:  # axes became an input
            return self.node("Unsqueeze", [x, self.constant(np.array([axis], np.int64))], out)
        return self.node("Unsqueeze", [x], out, axes=[axis])

    def stack(self, values, axis, out=None) -> str:
        """`values` stacked along a new `axis`."""
        if len(values) == 1:
            return self.unsqueeze(values[0], axis, out)
        return self.node("Concat", [self.unsqueeze(v, axis) for v in values], out, axis=axis)

    def outputs(self, node, values) -> None:
        """Make the node's (used) outputs the `values`; called last. An emitted node that makes a value writes the
        output instead; a value made elsewhere goes through an Identity (TVM's importer takes an Identity of a
        sequence for the sequence's first tensor: the first case is the one sequences need)."""
        producers = {out for n in self.nodes for out in n.output}
        renames = {}
        for out, value in zip(node.output, values):
            if out and value in producers and value not in renames:
                renames[value] = out
            elif out:
                self.node("Identity", [renames.get(value, value)], out)
        for n in self.nodes:
            _rename_node(n, renames, "")

    def copy_body(self, body, bindings: dict, prefix) -> list:
        """Emit `body`'s nodes with its inputs bound to values ({body input: value name}) and every other name it
        defines renamed to a fresh prefix + name; returns the values of its outputs."""
        if body.sparse_initializer:
            raise NotUnrollable("its body has sparse initializers")
        if len(self.nodes) + len(body.node) > self.unroll_pass.room:
            raise NotUnrollable(f"unrolled, it would make the model over {MAX_MODEL_NODES} nodes")
        renames = {name: self.unroll_pass.fresh(prefix + name) for name in _defined_names(body) if name not in bindings}
        renames.update(bindings)
        for tensor in body.initializer:
            self.initializers.append(_onnx().TensorProto())
            self.initializers[-1].CopyFrom(tensor)
            self.initializers[-1].name = renames[tensor.name]
        for node in body.node:
            copy = _onnx().NodeProto()
            copy.CopyFrom(node)
            _rename_node(copy, renames, prefix)
            self.nodes.append(copy)
        return [renames.get(v.name, v.name) for v in body.output]


def _rename_node(node, renames, prefix) -> None:
    """Rename (in place) the values `node` reads and writes, in its subgraphs too."""
    node.input[:] = [renames.get(n, n) for n in node.input]
    node.output[:] = [renames.get(n, n) for n in node.output]
    if node.name:
        node.name = prefix + node.name
    for graph in _subgraphs(node):
        for value in [*graph.input, *graph.output]:
            value.name = renames.get(value.name, value.name)
        for tensor in graph.initializer:
            tensor.name = renames.get(tensor.name, tensor.name)
        del graph.value_info[:]  # shape inference writes it again, under the new names
        for inner in graph.node:
            _rename_node(inner, renames, prefix)


# -- Scan -------------------------------------------------------------------------------------------------------


def _scan_length(scan_inputs, axes, scope) -> int:
    lengths = {scope.static_dim(x, axis, "its sequence length") for x, axis in zip(scan_inputs, axes)}
    if len(lengths) != 1:
        raise NotUnrollable(f"its scan inputs have different lengths {sorted(lengths)}")
    length = lengths.pop()
    if length == 0:
        raise NotUnrollable("its scan inputs are empty (an empty scan output has no static shape to take)")
    return length


def _scan_iterations(b, body, states, scanned, out_directions, length) -> tuple:
    """(final states, [values of each scan output, in output order]) of `length` copies of a Scan body;
    `scanned`: (scan input, axis, reverse) for each scan input."""
    n = len(states)
    outputs = [[] for _ in body.output[n:]]
    for t in range(length):
        slices = [b.take(x, length - 1 - t if reverse else t, axis) for x, axis, reverse in scanned]
        results = b.copy_body(body, dict(zip([v.name for v in body.input], [*states, *slices])), f"{b.label}_{t}_")
        states = results[:n]
        for values, value in zip(outputs, results[n:]):
            values.append(value)
    # a reverse scan output holds the last iteration's value first
    return states, [values[::-1] if reverse else values for values, reverse in zip(outputs, out_directions)]


def _unroll_scan(node, scope, b) -> None:
    attrs = _attrs(node)
    if b.opset < 9:
        return _unroll_scan8(node, attrs, scope, b)
    body, m = attrs["body"], attrs["num_scan_inputs"]
    states, scan_inputs = list(node.input[:-m]), list(node.input[-m:])
    k = len(body.output) - len(states)
    in_axes = attrs.get("scan_input_axes", [0] * m)
    scanned = list(zip(scan_inputs, in_axes, attrs.get("scan_input_directions", [0] * m)))
    finals, outputs = _scan_iterations(b, body, states, scanned, attrs.get("scan_output_directions", [0] * k),
                                       _scan_length(scan_inputs, in_axes, scope))
    for values, axis, out in zip(outputs, attrs.get("scan_output_axes", [0] * k), node.output[len(states):]):
        if out:
            b.stack(values, axis, out)
    b.outputs(node, finals)


def _unroll_scan8(node, attrs, scope, b) -> None:
    """Scan-8: every input and output has a batch axis 0 first (scan inputs are scanned along axis 1): one
    Scan-9 unrolled per batch entry, its results stacked along the batch axis."""
    if node.input[0]:
        raise NotUnrollable("it has sequence_lens (per-batch lengths)")
    body, m = attrs["body"], attrs["num_scan_inputs"]
    states, scan_inputs = list(node.input[1:-m]), list(node.input[-m:])
    length = _scan_length(scan_inputs, [1] * m, scope)
    per_batch = []
    for i in range(scope.static_dim(scan_inputs[0], 0, "its batch size")):
        scanned = [(b.take(x, i, 0), 0, reverse) for x, reverse in zip(scan_inputs, attrs.get("directions", [0] * m))]
        finals, outputs = _scan_iterations(b, body, [b.take(s, i, 0) for s in states], scanned,
                                           [0] * len(body.output), length)
        per_batch.append(finals + [b.stack(values, 0) for values in outputs])
    for out, values in zip(node.output, zip(*per_batch)):
        if out:
            b.stack(values, 0, out)


# -- Loop -------------------------------------------------------------------------------------------------------


def _trip_count(node, scope) -> int:
    if not _input(node, 0):
        raise NotUnrollable("it has no trip count (a while loop)")
    trip = scope.constant(node.input[0])
    if trip is None or trip.size != 1:
        raise NotUnrollable(f"its trip count {node.input[0]!r} is not a constant")
    return int(trip.reshape(()))


def _cone(output, body, known) -> list | None:
    """The body nodes computing `output` from values `known` (a predicate), in graph order; None when it needs
    another value (or a node with a subgraph)."""
    producers = {out: i for i, n in enumerate(body.node) for out in n.output if out}
    needed, stack = set(), [output]
    while stack:
        name = stack.pop()
        index = producers.get(name)
        if index is None:
            if name and not known(name):
                return None
        elif index not in needed:
            if _subgraphs(body.node[index]):
                return None
            needed.add(index)
            stack.extend(body.node[index].input)
    return [body.node[i] for i in sorted(needed)]


def _loop_condition(body, scope, opsets):
    """f(iteration) -> the condition a Loop body outputs in that iteration, when it is computed from the iteration
    number, the incoming condition (true) and constants."""
    iteration, incoming, output = body.input[0].name, body.input[1].name, body.output[0].name
    local = {t.name: t for t in body.initializer}

    def value(name, i):
        if name == iteration:
            return np.array(i, np.int64)
        if name == incoming:
            return np.array(True)
        return _onnx().numpy_helper.to_array(local[name]) if name in local else scope.constant(name)

    nodes = _cone(output, body, lambda name: value(name, 0) is not None)
    if nodes is None:
        raise NotUnrollable("its condition is computed from values known only at run time")
    made = {out for n in nodes for out in n.output}
    # the values the cone reads; with no nodes, the condition itself (the incoming one, or a constant)
    leaves = {name for n in nodes for name in n.input if name and name not in made} or {output} - made

    def condition(i):
        try:
            return _is_true(evaluate(nodes, {name: value(name, i) for name in leaves}, [output], opsets)[0])
        except Exception as err:  # an op onnx.reference cannot run
            raise NotUnrollable(f"its condition cannot be computed at import time ({describe(err)})") from None

    if iteration in leaves:
        return condition
    always = condition(0)
    return lambda i: always


def _loop_iterations(node, body, scope, b) -> int:
    """How many iterations a Loop runs: its trip count, or fewer when its condition turns false first."""
    trip = _trip_count(node, scope)
    if _input(node, 1) and not _is_true(scope.constant(node.input[1])):
        raise NotUnrollable(f"its initial condition {node.input[1]!r} is not a constant true")
    condition = _loop_condition(body, scope, b.unroll_pass.opsets)
    limit = b.unroll_pass.room // max(1, len(body.node))
    for i in range(min(trip, limit)):
        if not condition(i):
            return i + 1
    if trip > limit:
        raise NotUnrollable(f"{trip} iterations of its {len(body.node)}-node body would make the model over "
                            f"{MAX_MODEL_NODES} nodes")
    return max(trip, 0)


def _unroll_loop(node, scope, b) -> None:
    body = _attrs(node)["body"]
    iterations = _loop_iterations(node, body, scope, b)
    states = list(node.input[2:])
    outputs = [[] for _ in body.output[1 + len(states):]]
    if outputs and not iterations:
        raise NotUnrollable("it runs no iteration, so its scan outputs are empty (no static shape to take)")
    true = b.constant(np.array(True))
    for i in range(iterations):
        results = b.copy_body(body, dict(zip([v.name for v in body.input], [b.constant(np.int64(i)), true, *states])),
                              f"{b.label}_{i}_")
        states = results[1:1 + len(states)]
        for values, value in zip(outputs, results[1 + len(states):]):
            values.append(value)
    for values, out in zip(outputs, node.output[len(states):]):
        if out:
            b.stack(values, 0, out)
    b.outputs(node, states)


# -- SequenceMap ------------------------------------------------------------------------------------------------


def _split_pieces(split, scope) -> list:
    """(start, end) along its axis of each tensor a SplitToSequence node makes."""
    x, attrs = split.input[0], _attrs(split)
    dim = scope.static_dim(x, attrs.get("axis", 0), "the length of the sequence it splits")
    if not _input(split, 1):  # pieces of 1
        return [(i, i + 1) for i in range(dim)]
    sizes = scope.constant(split.input[1])
    if sizes is None:
        raise NotUnrollable(f"the split {split.input[1]!r} of its SplitToSequence input is not a constant")
    if sizes.ndim == 0:  # pieces of that size, the last one shorter
        sizes = [int(sizes)] * (dim // int(sizes)) + ([dim % int(sizes)] if dim % int(sizes) else [])
    ends = np.cumsum(sizes, dtype=np.int64)
    return [(int(end - size), int(end)) for size, end in zip(sizes, ends)]


def _sequence_maker(name, scope):
    """The SequenceConstruct or SplitToSequence node that makes sequence `name`: its length is known."""
    producer = scope.producer(name)
    if producer is None or producer.op_type not in ("SequenceConstruct", "SplitToSequence"):
        raise NotUnrollable(f"the length of its input sequence {name!r} is not known at import time (only "
                            f"sequences made by SequenceConstruct or SplitToSequence are)")
    return producer


def _sequence_length(name, scope) -> int:
    maker = _sequence_maker(name, scope)
    return len(maker.input) if maker.op_type == "SequenceConstruct" else len(_split_pieces(maker, scope))


def _sequence_elements(name, scope, b) -> list:
    """The tensors of a sequence of known length: a SplitToSequence's pieces are sliced out of its input (taken,
    the axis dropped, without keepdims)."""
    maker = _sequence_maker(name, scope)
    if maker.op_type == "SequenceConstruct":
        return list(maker.input)
    x, attrs = maker.input[0], _attrs(maker)
    axis, pieces = attrs.get("axis", 0), _split_pieces(maker, scope)
    if not _input(maker, 1) and not attrs.get("keepdims", 1):
        return [b.take(x, start, axis) for start, _ in pieces]
    return [b.slice(x, start, end, axis) for start, end in pieces]


def _unroll_sequence_map(node, scope, b) -> None:
    body = _attrs(node)["body"]
    # the first input is a sequence; each other input is one too, or a tensor every iteration reads
    elements = {name: _sequence_elements(name, scope, b) for i, name in enumerate(node.input)
                if i == 0 or scope.is_sequence(name)}
    lengths = {len(values) for values in elements.values()}
    if len(lengths) != 1:
        raise NotUnrollable(f"its input sequences have different lengths {sorted(lengths)}")
    length = lengths.pop()
    if length == 0:
        raise NotUnrollable("its input sequence is empty")
    outputs = [[] for _ in body.output]
    for i in range(length):
        operands = [elements[name][i] if name in elements else name for name in node.input]
        results = b.copy_body(body, dict(zip([v.name for v in body.input], operands)), f"{b.label}_{i}_")
        for values, value in zip(outputs, results):
            values.append(value)
    for values, out in zip(outputs, node.output):
        if out:
            b.node("SequenceConstruct", values, out)


def _fold_sequence_length(node, scope, b) -> None:
    """SequenceLength of a sequence of known length: a constant (the trip count of ONNX's own expansion of
    SequenceMap into a Loop)."""
    b.outputs(node, [b.constant(np.int64(_sequence_length(node.input[0], scope)))])


# -- If ---------------------------------------------------------------------------------------------------------


def _inline_if(node, scope, b) -> None:
    condition = scope.constant(node.input[0])
    if condition is None or condition.size != 1:
        raise NotUnrollable("its condition is not a constant")
    attrs = _attrs(node)
    branch = attrs["then_branch"] if _is_true(condition) else attrs["else_branch"]
    b.outputs(node, b.copy_body(branch, {}, f"{b.label}_"))


# -- the passes -------------------------------------------------------------------------------------------------

_UNROLLERS = {"Scan": _unroll_scan, "Loop": _unroll_loop, "SequenceMap": _unroll_sequence_map, "If": _inline_if,
              "SequenceLength": _fold_sequence_length}


def _unrolled(node, scope, unroll_pass):
    """The _Builder holding what replaces `node`; None when it is no control flow. Raises NotUnrollable."""
    unroll = _UNROLLERS.get(node.op_type) if node.domain in DEFAULT_DOMAINS else None
    if unroll is None:
        return None
    b = _Builder(unroll_pass, node.name or next((out for out in node.output if out), node.op_type))
    unroll(node, scope, b)
    return b


def _unroll_graph(graph, scope, unroll_pass) -> int:
    """Unroll the control flow of `graph` (in place), and of the If branches left; returns how many nodes."""
    nodes, count = [], 0
    for node in graph.node:
        try:
            unrolled = _unrolled(node, scope, unroll_pass)
        except NotUnrollable:
            unrolled = None
        if unrolled is None:
            nodes.append(node)
            if node.op_type == "If":
                count += sum(_unroll_graph(branch, _Scope(branch, scope), unroll_pass) for branch in _subgraphs(node))
        else:
            nodes += unrolled.nodes
            graph.initializer.extend(unrolled.initializers)
            unroll_pass.room -= len(unrolled.nodes) - 1
            count += 1
    if count:
        del graph.node[:]
        graph.node.extend(nodes)
    return count


def unroll_control_flow(model) -> int:
    """Unroll (in place) each Scan, Loop and SequenceMap whose count is static, and inline each If whose
    condition is a constant, in the main graph and the If branches left; returns how many were. Control flow
    copied from a body is unrolled by the next call."""
    return _unroll_graph(model.graph, _Scope(model.graph), _Pass(model))


def _left(graph, scope, unroll_pass):
    """(node, why it cannot be unrolled) for each Scan, Loop or SequenceMap of `graph` and its If branches."""
    for node in graph.node:
        if node.domain in DEFAULT_DOMAINS and node.op_type in UNROLLED_OPS:
            try:
                _unrolled(node, scope, unroll_pass)
                yield node, "it is nested deeper than xcomp unrolls"
            except NotUnrollable as why:
                yield node, str(why)
        elif node.op_type == "If":
            for branch in _subgraphs(node):
                yield from _left(branch, _Scope(branch, scope), unroll_pass)


def refuse_control_flow(model, opset) -> None:
    """UnsupportedOpError naming each Scan, Loop and SequenceMap left after unroll_control_flow, and why it could
    not be unrolled (TVM imports none of them)."""
    left = list(_left(model.graph, _Scope(model.graph), _Pass(model)))
    if left:
        raise UnsupportedOpError([(node.name, node.op_type, opset) for node, _ in left],
                                 [f"cannot unroll it: {why}" for _, why in left])

"""`xcomp info`: what a model contains, how it partitions into groups, and what is unsupported."""

from __future__ import annotations

from xcomp.errors import UnsupportedOpError
from xcomp.frontends.input_values import InputValuesRequired


def describe(model, target="cpu", input_shapes=None, input_values=None) -> dict:
    """A JSON-ready description: inputs, outputs, op histogram, unsupported nodes, operator groups."""
    from xcomp.native import tvm_log_to_logging

    with tvm_log_to_logging():
        return _describe(model, target, input_shapes, input_values)


def _describe(model, target, input_shapes, input_values) -> dict:
    from xcomp.backends import get_backend
    from xcomp.frontends import onnx as fe
    from xcomp.graph.partition import expr_text, flops_expr, partition, total_flops, unique_groups

    backend = get_backend(target)
    proto, folder, label = fe._read_proto(model)
    fe._load_external_data(proto, folder, label)
    opset = fe._model_opset(proto, label)
    result = {
        "model": label,
        "target": backend.target_string,
        "opset": opset,
        "inputs": [s.to_dict() for s in fe.graph_inputs(proto)],
        "ops": dict(fe.op_histogram(proto).most_common()),
        "unsupported": [
            {"node": name, "op": op, "opset": ver} for name, op, ver in fe.unsupported_nodes(proto, opset)
        ],
        "groups": [],
    }
    if result["unsupported"]:
        return result
    try:
        imported = fe.load_onnx(proto, input_shapes, input_values)
    except InputValuesRequired as err:  # supported once these values are given
        result["needs_input_values"] = {"inputs": err.inputs, "message": str(err)}
        return result
    except UnsupportedOpError as err:  # a converter refused a node the op table allowed
        result["unsupported"] = [{"node": n, "op": o, "opset": v} for n, o, v in err.nodes]
        return result
    fixed = {s.name: s.to_dict() for s in imported.bound_inputs}
    result["inputs"] = [fixed.get(s["name"], s) for s in result["inputs"]]
    result["outputs"] = [s.to_dict() for s in imported.outputs]
    _, groups = partition(imported.mod, backend.spec)
    terms = []
    for rep, count in unique_groups(groups).values():
        entry = rep.to_dict()
        entry["count"] = count
        terms.append((flops_expr(rep.func), count))
        if rep.symbols:  # "flops" holds the count with every symbolic dim at 1; this, the count at any size
            entry["flops_expr"] = expr_text(terms[-1][0])
        result["groups"].append(entry)
    result["total_flops"] = total_flops(groups)
    result["symbols"] = sorted({s for g in groups for s in g.symbols})
    if result["symbols"]:
        result["total_flops_expr"] = expr_text(_weighted_sum(terms))
    return result


def _weighted_sum(terms):
    """Sum of expr x count over [(expr, count)]. Every group's PrimFunc has its own Var for a dim (`batch` in one
    is not `batch` in the next), so vars are unified by name first."""
    from tvm import tirx
    from tvm.sym import Analyzer
    from tvm.tirx.analysis import undefined_vars

    analyzer, canonical = Analyzer(), {}
    total = tirx.IntImm("int64", 0)
    for expr, count in terms:
        for var in undefined_vars(expr):
            first = canonical.setdefault(var.name, var)
            if not first.same_as(var):
                analyzer.bind(var, first)
        total = total + expr * count
    return analyzer.simplify(total)

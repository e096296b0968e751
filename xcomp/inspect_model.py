"""`xcomp info`: what a model contains, how it partitions into groups, and what is unsupported."""

from __future__ import annotations

from xcomp.errors import UnsupportedOpError


def describe(model, target="cpu", input_shapes=None) -> dict:
    """A JSON-ready description: inputs, outputs, op histogram, unsupported nodes, operator groups."""
    from xcomp.backends import get_backend
    from xcomp.frontends import onnx as fe
    from xcomp.partition import partition, unique_groups

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
        imported = fe.load_onnx(proto, input_shapes)
    except UnsupportedOpError as err:  # a converter refused a node the op table allowed
        result["unsupported"] = [{"node": n, "op": o, "opset": v} for n, o, v in err.nodes]
        return result
    result["outputs"] = [s.to_dict() for s in imported.outputs]
    _, groups = partition(imported.mod, backend.spec)
    for rep, count in unique_groups(groups).values():
        entry = rep.to_dict()
        entry["count"] = count
        result["groups"].append(entry)
    result["total_flops"] = sum(g["flops"] * g["count"] for g in result["groups"])
    return result

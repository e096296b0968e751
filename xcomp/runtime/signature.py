"""Runtime shapes against a model's signature, whose dims are ints or symbolic names (`batch`, `seq`).

One compiled module serves every size of a symbolic dim; what it cannot serve is a wrong rank, a static dim of
another size, or one dim name given two sizes by two inputs.
"""

from __future__ import annotations

from xcomp.errors import InputError


def dim_sizes(specs, shapes: dict) -> dict:
    """{symbolic dim name: size} read from {input name: shape} (inputs not in `shapes` are skipped); an InputError
    names the input (and, for a shared dim, both inputs) when a shape does not fit the signature."""
    unknown = sorted(set(shapes) - {spec.name for spec in specs})
    if unknown:
        raise InputError(f"unknown input(s) {unknown}; the model's inputs are {[spec.name for spec in specs]}")
    sizes, first_use = {}, {}
    for spec in specs:
        if spec.name not in shapes:
            continue
        shape = tuple(int(d) for d in shapes[spec.name])
        if len(shape) != len(spec.shape) or any(isinstance(want, int) and want != got
                                                 for want, got in zip(spec.shape, shape)):
            raise InputError(f"input {spec.name!r}: expected shape {list(spec.shape)}, got {list(shape)}")
        for axis, (want, got) in enumerate(zip(spec.shape, shape)):
            if isinstance(want, int):
                continue
            if want in sizes and sizes[want] != got:
                other, other_axis = first_use[want]
                raise InputError(
                    f"inputs {other!r} and {spec.name!r} share dim {want!r}: input {other!r} dim {other_axis} is "
                    f"{sizes[want]}, so input {spec.name!r} dim {axis} must be {sizes[want]} too, got {got}"
                )
            sizes[want] = got
            first_use.setdefault(want, (spec.name, axis))
    return sizes


def concrete_shape(spec, sizes: dict, default: int = 1) -> tuple:
    """`spec`'s shape with each symbolic dim taken from `sizes`, else `default`."""
    return tuple(d if isinstance(d, int) else sizes.get(d, default) for d in spec.shape)


def is_symbolic(specs) -> bool:
    return any(isinstance(d, str) for spec in specs for d in spec.shape)


__all__ = ["dim_sizes", "concrete_shape", "is_symbolic"]

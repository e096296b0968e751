"""One error family for everything a user can get wrong (and for our own failures).

The CLI prints `str(err)` as one line and exits 1 for a `UserError`, 2 for an `InternalError`.
"""


# Starts the message of every check a compiled module makes at run time (frontends/onnx.py with_runtime_checks):
# Module turns the error TVM raises with it into an InputError with the rest of the message.
RUNTIME_CHECK_TAG = "xcomp run-time check: "


class XcompError(Exception):
    """Base of every error xcomp raises on purpose."""

    exit_code = 1


class UserError(XcompError):
    """The input (model, shapes, target, file) is at fault; the message says how."""


class ModelLoadError(UserError):
    """The model file is missing, unreadable, malformed or fails the ONNX checker."""


class UnsupportedOpError(UserError):
    """The model uses ops xcomp cannot import. `nodes` lists every one: (node name, op type, opset); `reasons`,
    when given, says for each why."""

    def __init__(self, nodes, reasons=()):
        self.nodes = list(nodes)
        lines = [f"{name or '<unnamed>'} ({op}" + (f", opset {opset})" if opset else ")") for name, op, opset in
                 self.nodes]
        if reasons:
            lines = [f"{line}: {reason}" for line, reason in zip(lines, reasons)]
        super().__init__(
            f"{len(self.nodes)} unsupported node(s): " + "; ".join(lines)
        )


class InputError(UserError):
    """A runtime input has the wrong name, shape or dtype, or a value the model cannot take (an index out of
    range)."""


class TargetError(UserError):
    """An unknown or unusable target string."""


class ArtifactError(UserError):
    """A saved module cannot be loaded (corrupt, or built for another target/version)."""


class InternalError(XcompError):
    """A bug in xcomp (or TVM): the message names the stage and the operator group."""

    exit_code = 2


def describe(err: BaseException, first: bool = False) -> str:
    """One line for an exception from below us (TVM, onnx, protobuf): its last (or first) non-empty line,
    else its type name. TVM puts the reason last, after a stack; the ONNX checker puts it first."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    return lines[0] if first else lines[-1]

"""xcomp: a multi-backend machine-learning compiler (ONNX in; CPU, CUDA and ROCm modules out)."""

import os as _os

from .version import __version__  # noqa: F401 - xcomp.__version__

# frontends/, schedules/, backends/ and costmodel/ sit at the top of the source tree and are installed as
# subpackages of xcomp. Running from a source checkout without an editable install (e.g. `python -c` in the
# repo root), map them here too, so `xcomp.frontends` means the same thing everywhere.
_repo_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_repo_root, "pyproject.toml")) and _os.path.isdir(
    _os.path.join(_repo_root, "frontends")
):
    __path__.append(_repo_root)  # noqa: F821  (package __path__)

from .errors import (  # noqa: E402
    ArtifactError,
    InputError,
    InternalError,
    ModelLoadError,
    TargetError,
    UnsupportedOpError,
    UserError,
    XcompError,
)
from .api import compile, load, tune  # noqa: E402,A004
from xcomp.runtime.module import Module  # noqa: E402

__all__ = [
    "compile",
    "load",
    "tune",
    "Module",
    "XcompError",
    "UserError",
    "ModelLoadError",
    "UnsupportedOpError",
    "InputError",
    "TargetError",
    "ArtifactError",
    "InternalError",
    "__version__",
]

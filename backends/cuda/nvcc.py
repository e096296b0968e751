"""Compile CUDA C with nvcc, ahead of time and without a GPU."""

from __future__ import annotations

import contextlib
import os
import shutil


def find_nvcc() -> str | None:
    """nvcc on PATH, else under $CUDA_HOME or the usual /usr/local/cuda."""
    candidates = [shutil.which("nvcc")]
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            candidates.append(os.path.join(root, "bin", "nvcc"))
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


@contextlib.contextmanager
def _nvcc_on_path(nvcc: str):
    """TVM's compile_cuda runs a bare "nvcc": put ours first on PATH for the duration of one compile."""
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = os.path.dirname(nvcc) + os.pathsep + old
    try:
        yield
    finally:
        os.environ["PATH"] = old


def compile_source(source: str, target, fmt: str = "ptx") -> bytes:
    """CUDA C -> "ptx" / "cubin" / "fatbin" for a CUDA tvm Target, with TVM's usual nvcc flags."""
    from tvm.support import nvcc as tvm_nvcc

    from xcomp.errors import TargetError

    nvcc = find_nvcc()
    if nvcc is None:
        raise TargetError(
            "nvcc not found (looked on PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): install the CUDA toolkit "
            "to produce PTX/cubin ahead of time"
        )
    # compile_cuda reads the compute version from the current target (or a visible GPU, which we may not have)
    with _nvcc_on_path(nvcc), target:
        return bytes(tvm_nvcc.compile_cuda(source, target_format=fmt, arch=target.attrs["arch"], compiler="nvcc"))

"""What a report records so a run can be understood and repeated: the machine, software versions, the model."""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import sys


def _cpu_model() -> str:
    from xcomp.backends.cpu.detect import cpu_model_name

    return cpu_model_name() or platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine() -> dict:
    from xcomp.backends.cpu.detect import host_cpu

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_bytes": _memory_bytes(),
        "host_spec": host_cpu().to_dict(),
    }


def _version(module_name: str):
    try:
        module = __import__(module_name)
    except ImportError:
        return None
    return getattr(module, "__version__", "unknown")


def blas_library() -> str:
    """numpy's BLAS as numpy reports it, e.g. 'scipy-openblas 0.3.31 (OpenBLAS ... Haswell MAX_THREADS=64)'."""
    import numpy as np

    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        text = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
        config = blas.get("openblas configuration")
        return f"{text} ({config.strip()})" if config else text
    except Exception:  # older numpy: no dict mode
        return "unknown"


def versions() -> dict:
    from xcomp.version import __version__

    return {
        "xcomp": __version__,
        "python": sys.version.split()[0],
        "tvm": _version("tvm"),
        "onnx": _version("onnx"),
        "onnxruntime": _version("onnxruntime"),
        "numpy": _version("numpy"),
        "matplotlib": _version("matplotlib"),
        "torch": _version("torch"),  # None: not installed
        "blas": blas_library(),
    }


def command_line(argv=None) -> dict:
    argv = list(sys.argv if argv is None else argv)
    if argv and os.path.basename(argv[0]) in ("xcomp", "__main__.py", "cli.py"):
        argv[0] = "xcomp"
    return {"argv": argv, "text": shlex.join(argv), "cwd": os.getcwd()}


def model_identity(model, label: str) -> dict:
    """Name the model and fingerprint its bytes (results from another machine must be for the same model)."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        data = model.SerializeToString()
        path = None
    elif isinstance(model, (bytes, bytearray)):
        data, path = bytes(model), None
    else:
        from xcomp.errors import ModelLoadError

        path = os.fspath(model)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as err:
            raise ModelLoadError(f"cannot read model {path}: {err.strerror or err}") from None
    return {"source": label, "path": os.path.abspath(path) if path else None,
            "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data)}

"""The two TVM callbacks a ROCm build needs on a machine without ROCm (registered by tvm_compat.prepare).

- Linking: TVM links each AMDGPU object with ld.lld. It must be LLVM 22's (TVM 0.27's LLVM); Debian's default
  `ld.lld` is lld 14 and fails with "unknown abi version". We look only for a matching one and say how to get it.
- Device libraries: TVM links ROCm's bitcode (ocml/ockl) from /opt/rocm; with no ROCm installed we link none, so
  kernels that call device-library math (expf, tanhf, ...) will fail to link with an undefined symbol.
"""

from __future__ import annotations

import os
import shutil
import tempfile

INSTALL_HINT = "apt-get install lld-22"


def find_linker() -> str | None:
    import tvm

    major = tvm.target.codegen.llvm_version_major()
    candidates = [shutil.which(f"ld.lld-{major}"), f"/usr/lib/llvm-{major}/bin/ld.lld", "/opt/rocm/llvm/bin/ld.lld"]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def linker_problem() -> str | None:
    if find_linker() is None:
        import tvm

        major = tvm.target.codegen.llvm_version_major()
        return f"ROCm code needs ld.lld from LLVM {major} (TVM's LLVM), not found; install it: {INSTALL_HINT}"
    return None


def link_code_object(relocatable) -> bytearray:
    """Relocatable AMDGPU ELF -> HSA code object (a shared ELF), as TVM expects from this callback."""
    from tvm.support.rocm import rocm_link

    from xcomp.errors import TargetError

    linker = find_linker()
    if linker is None:
        raise TargetError(linker_problem())
    with tempfile.TemporaryDirectory(prefix="xcomp-rocm-") as tmp:
        obj, code_object = os.path.join(tmp, "kernels.o"), os.path.join(tmp, "kernels.hsaco")
        with open(obj, "wb") as f:
            f.write(bytes(relocatable))
        rocm_link(obj, code_object, lld=linker)
        with open(code_object, "rb") as f:
            return bytearray(f.read())


def device_bitcode(rocdl_dir=None) -> list:
    from tvm.support.rocm import callback_rocm_bitcode_path, find_rocm_path

    try:
        find_rocm_path()
    except RuntimeError:  # no ROCm install: no device libraries to link
        return []
    return list(callback_rocm_bitcode_path(rocdl_dir))

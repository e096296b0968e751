"""Get the HSA code object (.hsaco) out of a built ROCm module.

TVM keeps it only inside the module's serialized form (inspect_source cannot return binary): we serialize the
module the way export_library does and cut the one AMDGPU ELF out of it, sized by its own header.
"""

from __future__ import annotations

import struct

_ELF_MAGIC = b"\x7fELF"
_EM_AMDGPU = 224


def _serialized(module) -> bytes:
    """The bytes export_library would embed for `module` (it is packed as the import of an empty holder)."""
    import tvm_ffi

    holder = tvm_ffi.get_global_func("runtime.CSourceModuleCreate")("", "c", [], [])
    holder.import_module(module)
    return bytes(tvm_ffi.get_global_func("runtime.ModulePackImportsToTensor")(holder).numpy())


def elf_size(data: bytes, start: int) -> int:
    """Length of the ELF64 image at `start`: ld.lld writes the section header table last."""
    shoff, = struct.unpack_from("<Q", data, start + 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, start + 0x3A)
    return shoff + shentsize * shnum


def extract_code_object(module) -> bytes:
    data = _serialized(module)
    start = data.find(_ELF_MAGIC)
    if start < 0 or struct.unpack_from("<H", data, start + 0x12)[0] != _EM_AMDGPU:
        from xcomp.errors import InternalError

        raise InternalError("no AMDGPU code object found in the ROCm module")
    return data[start:start + elf_size(data, start)]

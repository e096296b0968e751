"""xcomp.Module: a compiled model you can call on numpy arrays, time, save to one file and load back."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import zipfile

import numpy as np

from xcomp.errors import RUNTIME_CHECK_TAG, ArtifactError, InputError, UserError, describe
from xcomp.native import silence_native_stderr
from xcomp.runtime.memory_pool import release_free_blocks
from xcomp.runtime.signature import concrete_shape, dim_sizes, is_symbolic
from xcomp.runtime.thread_pool import pool_governor
from xcomp.timing import time_calls

# 2: CPU kernels read their parameters at any element-aligned address (backends/cpu/param_alignment.py), and
# calls pass them so; a format-1 library assumed 64-byte aligned ones
ARTIFACT_FORMAT = 2
_META = "metadata.json"


class Module:
    """A model compiled for one target.

    `m(x)` / `m(x, y)` / `m(name=x)` run it on numpy arrays and return one array (one output) or a list;
    `m.run({name: array})` returns {output name: array}. `m.inputs` / `m.outputs` give the signature;
    `m.bound_inputs` the inputs fixed at compile time (input_values), which a call may leave out or repeat.
    """

    def __init__(self, executable, backend, inputs, outputs, groups=(), info=None, bound_inputs=()):
        self._executable = executable
        self._backend = backend
        self.inputs = list(inputs)
        self._input_names = [s.name for s in self.inputs]
        self.outputs = list(outputs)
        self.bound_inputs = list(bound_inputs)
        self.groups = list(groups)
        self.info = dict(info or {})
        self._symbolic = is_symbolic(self.inputs)
        self._fitting_shapes = None  # the input shapes of the last call, which fit the signature
        self._fresh_outputs = _fresh_outputs(self.info, len(self.outputs))
        self._vm = None
        self._main = None
        self._staging = _Staging()

    # -- signature --------------------------------------------------------------------------------------------

    @property
    def backend(self):
        """The Backend this module was built by (its spec, target and device)."""
        return self._backend

    @property
    def target(self) -> str:
        return self._backend.target_string

    @property
    def spec(self):
        return self._backend.spec

    def __repr__(self):
        sig = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.inputs)
        sig += "".join(f", {s.name}={list(s.value) if len(s.value) <= 8 else '...'} (fixed)"
                       for s in self.bound_inputs)
        out = ", ".join(f"{s.dtype}{list(s.shape)}" for s in self.outputs)
        return f"<xcomp.Module {self.info.get('model_name', '')!r} target={self.target} ({sig}) -> ({out})>"

    # -- running ----------------------------------------------------------------------------------------------

    def _machine(self):
        if self._vm is None:
            from tvm import relax

            if not self._backend.can_run():
                raise UserError(
                    f"this module was built for {self.target} ({self.spec.name}), which cannot run on this "
                    "machine; save it and run it where that hardware is"
                )
            self._vm = relax.VirtualMachine(self._executable, self._backend.device())
        return self._vm

    def _entry(self):
        """(main, device, whether it is the CPU: inputs go over DLPack, calls through the pool's governor), looked
        up once: a small model's call is short enough for these lookups to show."""
        if self._main is None:
            dev = self._backend.device()
            # not the CPU (kDLCPU = 1): a GPU gets a copy through tvm.runtime.tensor
            self._main = (self._machine()["main"], dev, dev.dlpack_device_type() == 1)
        return self._main

    def _bind(self, args, kwargs) -> list:
        """Positional/named arguments -> arrays in input order, each checked against the signature. New shapes of a
        symbolic module first release the pool's free blocks, which were sized for the last ones."""
        if kwargs or len(args) != len(self.inputs):
            args = self._arguments_in_order(args, kwargs)
        arrays = [_checked_array(spec, value) for spec, value in zip(self.inputs, args)]
        shapes = tuple([a.shape for a in arrays])  # (a list comprehension: faster than a generator)
        if shapes != self._fitting_shapes:  # a serving loop calls with the same shapes again and again
            if self._symbolic or any(shape != spec.shape for shape, spec in zip(shapes, self.inputs)):
                dim_sizes(self.inputs, {spec.name: shape for spec, shape in zip(self.inputs, shapes)})
            if self._symbolic:  # runtime/memory_pool.py
                release_free_blocks()
            self._fitting_shapes = shapes
        return arrays

    def _arguments_in_order(self, args, kwargs) -> list:
        """The inputs' values in signature order from positional and named arguments (inputs fixed at compile
        time may be named too, with the value they were fixed to)."""
        names = self._input_names
        if not args and len(kwargs) == len(names):  # `run`'s usual feed: each input named once, nothing else
            try:
                return [kwargs[name] for name in names]
            except KeyError:
                pass  # a name that is not an input's: the checks below say which
        if len(args) > len(names):
            fixed = f" ({[s.name for s in self.bound_inputs]} fixed at compile time)" if self.bound_inputs else ""
            raise InputError(f"the model takes {len(names)} input(s) {names}{fixed}, got {len(args)} positional "
                             "arguments")
        given = dict(zip(names, args))
        bound = {s.name: s for s in self.bound_inputs}
        for name, value in kwargs.items():
            if name in bound:
                bound[name].check_value(np.asarray(value))
                continue
            if name not in names:
                raise InputError(f"unknown input {name!r}; the model's inputs are {names}")
            if name in given:
                raise InputError(f"input {name!r} given twice (positionally and by name)")
            given[name] = value
        missing = [n for n in names if n not in given]
        if missing:
            raise InputError(f"missing input(s) {missing}; the model's inputs are {names}")
        return [given[n] for n in names]

    def _run_arrays(self, arrays) -> list:
        main, dev, on_cpu = self._entry()
        args = [_to_device(a, dev, self._staging if on_cpu else None, i) for i, a in enumerate(arrays)]
        try:
            result = pool_governor().run(main, *args) if on_cpu else main(*args)
        except Exception as err:
            raise_runtime_check(err)
        outs = list(result) if not hasattr(result, "numpy") else [result]
        fresh = self._fresh_outputs if len(outs) == len(self._fresh_outputs) else [False] * len(outs)
        return [_to_numpy(o, copy=not own) for o, own in zip(outs, fresh)]

    def __call__(self, *args, **kwargs):
        outs = self._run_arrays(self._bind(args, kwargs))
        return outs[0] if len(outs) == 1 else outs

    def run(self, inputs: dict) -> dict:
        """{input name: array} -> {output name: array}."""
        outs = self._run_arrays(self._bind((), dict(inputs)))
        return {spec.name: out for spec, out in zip(self.outputs, outs)}

    def random_inputs(self, seed: int = 0, input_shapes: dict | None = None) -> dict:
        """Inputs of the right shapes and dtypes (standard normal floats; small non-negative ints), and the bound
        inputs' fixed values: a whole feed of the model, for this module and for onnxruntime alike. A symbolic dim
        takes its size from `input_shapes` ({input name: shape}, checked against the signature), else 1."""
        rng = np.random.default_rng(seed)
        input_shapes = dict(input_shapes or {})
        sizes = dim_sizes(self.inputs, input_shapes)
        out = {}
        for spec in self.inputs:
            shape = concrete_shape(spec, sizes)
            if np.issubdtype(np.dtype(spec.dtype), np.floating):
                out[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
            elif spec.dtype == "bool":
                out[spec.name] = rng.integers(0, 2, shape).astype(bool)
            else:
                out[spec.name] = rng.integers(0, 4, shape).astype(spec.dtype)
        for spec in self.bound_inputs:
            out[spec.name] = spec.value_array()
        return out

    def benchmark(self, inputs: dict | None = None, warmup: int = 3, repeat: int = 30) -> dict:
        """Latency in ms of whole-model calls (inputs already on the device): median, p90, min, max."""
        import tvm

        vm = self._machine()
        dev = self._backend.device()
        arrays = self._bind((), dict(inputs if inputs is not None else self.random_inputs()))
        args = [tvm.runtime.tensor(a, dev) for a in arrays]
        fn = vm["main"]
        with runtime_checks_as_input_errors():
            samples = time_calls(lambda: fn(*args), repeat, warmup, sync=dev.sync)
        return latency_stats(samples)

    def emit_sources(self, out_dir) -> list:
        """Write the generated code (LLVM IR/asm; CUDA source and PTX; AMDGPU asm and code object) to out_dir."""
        return self._backend.emit_sources(self._executable, os.fspath(out_dir))

    # -- persistence ------------------------------------------------------------------------------------------

    def metadata(self) -> dict:
        import tvm

        from xcomp.version import __version__

        return {
            "format": ARTIFACT_FORMAT,
            "xcomp_version": __version__,
            "tvm_version": tvm.__version__,
            "target": self.target,
            "hardware": self.spec.to_dict(),
            "hardware_fingerprint": self.spec.fingerprint(),
            "inputs": [s.to_dict() for s in self.inputs],
            "bound_inputs": [s.to_dict() for s in self.bound_inputs],
            "outputs": [s.to_dict() for s in self.outputs],
            "groups": [g.to_dict() for g in self.groups],
            "info": self.info,
            "library": "lib.so" if self._backend.can_link_here() else "lib.tar",
        }

    def save(self, path) -> str:
        """Write the module to one file (a zip of the compiled library and its metadata)."""
        path = os.fspath(path)
        meta = self.metadata()
        workdir = tempfile.mkdtemp(prefix="xcomp-save-")
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            lib_path = os.path.join(workdir, meta["library"])
            with silence_native_stderr():
                self._executable.export_library(lib_path)
            tmp = path + ".tmp"
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf:
                zf.writestr(_META, json.dumps(meta, indent=1))
                zf.write(lib_path, meta["library"])
            os.replace(tmp, path)  # a crash mid-save never leaves a half-written artifact behind
        except OSError as err:
            raise UserError(f"cannot write {path}: {err.strerror or err}") from None
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return path


# staging buffers start on a cache line (the kernels need only their elements aligned)
_STAGING_ALIGNMENT = 64


def _fresh_outputs(info: dict, count: int) -> list:
    """Whether each call allocates each output afresh (runtime/fresh_outputs.py); a module saved before this was
    recorded, or whose record does not fit its outputs, copies every output."""
    fresh = info.get("fresh_outputs")
    if isinstance(fresh, list) and len(fresh) == count and all(isinstance(f, bool) for f in fresh):
        return fresh
    return [False] * count


def _checked_array(spec, value):
    """`value` as an array of `spec`'s dtype, its indices in range; C-contiguous, which the kernels assume."""
    if value is None:
        raise InputError(f"input {spec.name!r}: got None, expected a {spec.dtype} array")
    try:
        array = np.asarray(value)
    except ValueError as err:  # a ragged nested list
        raise InputError(f"input {spec.name!r}: cannot be read as an array ({err})") from None
    if array.dtype != spec.numpy_dtype:
        raise InputError(
            f"input {spec.name!r}: expected dtype {spec.dtype}, got {array.dtype} "
            f"(convert with .astype(np.{spec.dtype}))"
        )
    spec.check_indices(array)
    # (np.ascontiguousarray would turn a 0-d scalar input into shape [1])
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


class _Staging(threading.local):
    """Each thread's 64-byte aligned copies of the inputs, kept from call to call: a fresh buffer for each call
    costs page faults, more than the copy itself (docs/decisions/call-overhead.md). A buffer keeps its memory
    when the input shrinks or grows within it, as a KV cache does by one row a step. The TVM tensor over a
    buffer is kept too while its input's shape and dtype stay the same: a serving loop's calls then only copy."""

    def __init__(self):
        self.blocks = {}
        self.tensors = {}  # input index -> ((shape, dtype), aligned array, TVM tensor over it)

    def tensor(self, index: int, array):
        """A TVM tensor over input `index`'s aligned buffer, holding a copy of `array`."""
        import tvm_ffi

        kind = (array.shape, array.dtype)
        staged = self.tensors.get(index)
        if staged is None or staged[0] != kind:
            aligned = self.buffer(index, array)
            staged = (kind, aligned, tvm_ffi.from_dlpack(aligned, require_alignment=_STAGING_ALIGNMENT))
            self.tensors[index] = staged
        np.copyto(staged[1], array)
        return staged[2]

    def buffer(self, index: int, array):
        """An aligned array of `array`'s shape and dtype for input `index`."""
        block = self.blocks.get(index)
        if block is None or block.nbytes < array.nbytes + _STAGING_ALIGNMENT:
            # room to grow by a quarter before the next reallocation
            block = np.empty(array.nbytes + array.nbytes // 4 + _STAGING_ALIGNMENT, np.uint8)
            self.blocks[index] = block
        start = -block.ctypes.data % _STAGING_ALIGNMENT
        return block[start:start + array.nbytes].view(array.dtype).reshape(array.shape)


def _to_device(array, dev, staging=None, index=0):
    """`array` as a TVM tensor on `dev`. On the CPU (`staging`, a _Staging) it goes through DLPack, much cheaper
    per call than tvm.runtime.tensor, which a small model's latency notices (docs/decisions/call-overhead.md):
    as it is where its elements are aligned (backends/cpu/param_alignment.py) and it is writable, else copied into
    staging buffer `index`. The kernels only read their inputs. Without staging (a GPU), and for what numpy's
    DLPack lacks (bool; an empty array, whose data pointer a slice does not place), a copy by
    tvm.runtime.tensor."""
    import tvm_ffi

    if staging is None or array.dtype == bool or not array.size:
        import tvm  # (here only: an import statement costs every call 0.1 us)

        return tvm.runtime.tensor(array, dev)
    if not (array.flags.aligned and array.flags.writeable):
        return staging.tensor(index, array)
    return tvm_ffi.from_dlpack(array, require_alignment=array.dtype.itemsize)


def _to_numpy(tensor, copy=True):
    """An output as a numpy array through DLPack where numpy takes the dtype, several times faster than
    .numpy(). `copy`: unless each call allocates the output afresh (runtime/fresh_outputs.py), since it can be
    one of the module's constants, which must not change, or an input."""
    try:
        array = np.from_dlpack(tensor)
    except (BufferError, TypeError, RuntimeError):  # a device tensor, or a dtype numpy's DLPack lacks
        return tensor.numpy()
    return array.copy() if copy else array


def raise_runtime_check(err: Exception):
    """Re-raise an error from a compiled main: a run-time check it failed (an index computed in the graph out of
    range; frontends/onnx.py with_runtime_checks) as an InputError with the check's message, anything else as is."""
    text = str(err)
    if RUNTIME_CHECK_TAG not in text:
        raise err
    message = text[text.index(RUNTIME_CHECK_TAG) + len(RUNTIME_CHECK_TAG):].splitlines()[0].strip()
    raise InputError(message) from None


@contextlib.contextmanager
def runtime_checks_as_input_errors():
    """raise_runtime_check around a block of calls."""
    try:
        yield
    except Exception as err:
        raise_runtime_check(err)


def latency_stats(samples_ms) -> dict:
    a = np.asarray(samples_ms, dtype=np.float64)
    return {
        "median_ms": float(np.median(a)),
        "p90_ms": float(np.percentile(a, 90)),
        "min_ms": float(a.min()),
        "max_ms": float(a.max()),
        "mean_ms": float(a.mean()),
        "std_ms": float(a.std()),
        "runs": int(a.size),
    }


def _read_artifact(path):
    """(the open zip, its checked metadata); an ArtifactError naming the file for anything else."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ArtifactError(f"{path}: no such file")
    # a damaged zip raises many types (BadZipFile, OSError, EOFError, ValueError, ...): each means the same here
    try:
        zf = zipfile.ZipFile(path)
    except Exception:
        raise ArtifactError(f"{path}: not an xcomp module (expected a .xc file written by Module.save)") from None
    try:
        meta = json.loads(zf.read(_META))
    except Exception:  # no metadata, a damaged member (zlib.error; RuntimeError for one flagged encrypted), bad JSON
        zf.close()
        raise ArtifactError(f"{path}: not an xcomp module (metadata missing or corrupt)") from None
    try:
        return zf, _checked_metadata(path, meta)
    except ArtifactError:
        zf.close()
        raise


# The metadata keys load reads and their types (the others, such as xcomp_version, are only shown to people).
_REQUIRED_META = {"format": int, "tvm_version": str, "target": str, "hardware": dict, "library": str,
                  "inputs": list, "outputs": list}
_OPTIONAL_META = {"groups": list, "info": dict, "bound_inputs": list}
_JSON_TYPES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
               dict: "an object", type(None): "null"}


def _checked_metadata(path, meta) -> dict:
    """`meta` when it has every key load reads, each of its type; else an ArtifactError naming the file and key."""
    if not isinstance(meta, dict):
        raise ArtifactError(f"{path}: not an xcomp module (its metadata is not a JSON object)")
    # another format may have other keys: say that it is another format before naming a missing key
    if isinstance(meta.get("format"), int) and meta["format"] != ARTIFACT_FORMAT:
        raise ArtifactError(f"{path}: artifact format {meta['format']} is not {ARTIFACT_FORMAT}; recompile")
    for key, kind in {**_REQUIRED_META, **_OPTIONAL_META}.items():
        if key not in meta:
            if key in _REQUIRED_META:
                raise ArtifactError(f"{path}: corrupt module: its metadata has no {key!r}")
            continue
        value = meta[key]
        if not isinstance(value, kind) or isinstance(value, bool):  # (JSON true is a Python int)
            raise ArtifactError(f"{path}: corrupt module: metadata {key!r} is "
                                f"{_JSON_TYPES.get(type(value), type(value).__name__)}, expected {_JSON_TYPES[kind]}")
    if not isinstance(meta["hardware"].get("name"), str):
        raise ArtifactError(f"{path}: corrupt module: metadata 'hardware' has no 'name' string")
    return meta


def _entries(path, meta, key, from_dict) -> list:
    """meta[key]'s entries rebuilt by from_dict; a malformed one is an ArtifactError naming the file and key."""
    try:
        return [from_dict(d) for d in meta.get(key, [])]
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ArtifactError(f"{path}: corrupt module: an entry of metadata {key!r} is malformed "
                            f"({type(err).__name__}: {err})") from None


def _tensor_spec(d):
    """A TensorSpec from the metadata, its types checked: a call checks its arrays against it, where a bad one
    would surface as an internal error instead."""
    from xcomp.frontends.onnx import TensorSpec

    spec = TensorSpec.from_dict(d)
    index_range = spec.index_range or (0, 0, "")
    if not (isinstance(spec.name, str) and isinstance(spec.dtype, str)
            and all(isinstance(n, str) or _is_int(n) for n in spec.shape)
            and len(index_range) == 3 and _is_int(index_range[0]) and _is_int(index_range[1])):
        raise TypeError(f"not a tensor signature: {d!r}")
    spec.numpy_dtype  # an unknown dtype raises TypeError here
    if spec.value is not None:
        spec.value_array()  # a value that does not fit the dtype and shape raises here
    return spec


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def load(path) -> Module:
    """Load a module written by Module.save; says so when it was built for other hardware or versions."""
    import tvm

    from xcomp.backends import get_backend
    from xcomp.errors import TargetError
    from xcomp.graph.partition import OpGroup

    zf, meta = _read_artifact(path)
    with zf:
        if meta["tvm_version"] != tvm.__version__:
            raise ArtifactError(
                f"{path}: built with TVM {meta['tvm_version']}, this xcomp runs TVM {tvm.__version__}; recompile"
            )
        try:
            backend = get_backend(meta["target"])
        except TargetError as err:
            raise ArtifactError(f"{path}: corrupt module: metadata 'target': {err}") from None
        if not backend.can_run():
            raise ArtifactError(
                f"{path}: built for {meta['target']} ({meta['hardware']['name']}), which this machine cannot run"
            )
        inputs, outputs, bound_inputs = (_entries(path, meta, key, _tensor_spec)
                                         for key in ("inputs", "outputs", "bound_inputs"))
        groups = _entries(path, meta, "groups", OpGroup.from_dict)
        if meta["library"] not in zf.namelist():
            raise ArtifactError(f"{path}: compiled library {meta['library']} missing from the file")
        workdir = tempfile.mkdtemp(prefix="xcomp-load-")
        try:
            try:  # (extracting checks the library's CRC: a damaged one stops here, before it is loaded)
                lib_path = zf.extract(meta["library"], workdir)
                with silence_native_stderr():
                    lib = tvm.runtime.load_module(lib_path)
            except Exception as err:
                raise ArtifactError(f"{path}: cannot load the compiled library: {describe(err)}") from None
        finally:
            shutil.rmtree(workdir, ignore_errors=True)  # the library is mapped; the file is no longer needed
    return Module(lib, backend, inputs=inputs, outputs=outputs, groups=groups, info=meta.get("info", {}),
                  bound_inputs=bound_inputs)

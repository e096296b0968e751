"""The package's shape: no import cycles between its modules, counting the imports inside functions (they only
hide a cycle from Python, not from a reader)."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
# source folder -> the package it installs as (pyproject.toml's package-dir)
PACKAGES = {"xcomp": "xcomp", "frontends": "xcomp.frontends", "schedules": "xcomp.schedules",
            "backends": "xcomp.backends", "costmodel": "xcomp.costmodel"}


def _modules() -> dict:
    """{dotted module name: file}."""
    found = {}
    for folder, package in PACKAGES.items():
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, name[:-3]), os.path.join(ROOT, folder))
                    parts = [p for p in rel.split(os.sep) if p not in ("__init__", ".")]
                    found[".".join([package, *parts])] = os.path.join(dirpath, name)
    return found


def _imported(module: str, path: str, modules: dict) -> set:
    """The package's modules that `module` imports anywhere in its file."""
    is_package = path.endswith("__init__.py")
    names = []
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import sub` needs the submodule; `from pkg import name` needs pkg's own code
            names += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    targets = set()
    for name in names:
        while name and name not in modules:  # `from pkg.mod import function`: the module is pkg.mod
            name = name.rpartition(".")[0]
        if name and name != module:
            targets.add(name)
    return targets


def _cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _graph() -> dict:
    modules = _modules()
    return {m: _imported(m, p, modules) for m, p in modules.items()}


def test_the_package_has_no_import_cycle():
    cycles = _cycles(_graph())
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = _graph()
    assert "xcomp.pipeline" in graph["xcomp.api"]  # it reads the imports inside functions too


# The package's stages, lowest first: a module may import its own stage and those before it, never a later one. The
# compile path reads tuning records (xcomp.autotune.db) but never imports the tuner.
STAGES = (
    ("base", ("xcomp.errors", "xcomp.version", "xcomp.progress", "xcomp.native", "xcomp.timing")),
    ("compile", ("xcomp.frontends", "xcomp.schedules", "xcomp.costmodel", "xcomp.backends", "xcomp.graph",
                 "xcomp.runtime", "xcomp.pipeline", "xcomp.autotune.db")),
    ("tuning", ("xcomp.autotune",)),
    ("the Python API", ("xcomp.api", "xcomp")),
    ("reporting and tools", ("xcomp.report", "xcomp.tools")),
    ("the command line", ("xcomp.cli", "xcomp.__main__")),
)


def _stage(module: str) -> int:
    """The index in STAGES of the longest prefix naming `module`'s package (xcomp.autotune.db before xcomp.autotune)."""
    matches = [(len(prefix), index) for index, (_, prefixes) in enumerate(STAGES) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no stage: add it to STAGES"
    return max(matches)[1]


def _later_stage_imports(graph: dict) -> list:
    return sorted(f"{module} -> {name}" for module, imports in graph.items() for name in imports
                  if _stage(name) > _stage(module))


def test_no_module_imports_a_later_stage():
    assert _later_stage_imports(_graph()) == []


def test_the_stage_check_finds_a_backward_import():
    graph = _graph()
    assert all(_stage(module) >= 0 for module in graph)  # every module has a stage
    assert _later_stage_imports({"xcomp.pipeline": {"xcomp.autotune.tuner"}, "xcomp.autotune.tuner": set()}) == [
        "xcomp.pipeline -> xcomp.autotune.tuner"]
    assert _later_stage_imports({"xcomp.pipeline": {"xcomp.autotune.db"}, "xcomp.autotune.db": set()}) == []


def test_the_timing_module_needs_nothing_of_xcomp():
    """A measurement bundle carries it to a machine without xcomp."""
    assert _graph()["xcomp.timing"] == set()


def test_schedule_templates_never_look_a_backend_up():
    """Templates get what they know of the machine from the backend's ScheduleContext: a new backend needs no
    change in schedules/."""
    for module, imports in _graph().items():
        if module.startswith("xcomp.schedules"):
            assert not any(name.startswith("xcomp.backends") for name in imports), (module, imports)


def test_tvm_process_state_is_changed_in_one_module():
    """TVM_NUM_THREADS and the TVM callbacks xcomp overrides are set by backends/tvm_compat.py alone, which runs
    before any backend is made; no other module registers a TVM global function or sets TVM's environment."""
    import re

    offenders = []
    for module, path in _modules().items():
        if module in ("xcomp.backends.tvm_compat", "xcomp.timing"):  # timing's preprocessor: per measurement
            continue
        text = open(path).read()
        if re.search(r"register_global_func|environ\.setdefault\(\"TVM_|environ\[\"TVM_", text):
            offenders.append(module)
    assert offenders == []
    import os

    import tvm

    from xcomp.backends import get_backend

    from xcomp.backends.rocm.toolchain import device_bitcode

    get_backend("rocm:gfx942")
    assert int(os.environ["TVM_NUM_THREADS"]) >= 1
    # TVM's own callback raises where ROCm is not installed; ours answers as device_bitcode does
    assert list(tvm.get_global_func("tvm_callback_rocm_bitcode_path")()) == device_bitcode()


@pytest.mark.parametrize("user_value", [None, "5"])
def test_thread_pool_workers_spin_between_regions_unless_the_user_says(user_value):
    """A fresh process that makes a backend runs TVM's pool with tvm_compat's spin count
    (docs/decisions/thread-count.md), and keeps a spin count the user set."""
    import subprocess
    import sys

    from xcomp.backends import tvm_compat

    env = {k: v for k, v in os.environ.items() if k != "TVM_THREAD_POOL_SPIN_COUNT"}
    if user_value is not None:
        env["TVM_THREAD_POOL_SPIN_COUNT"] = user_value
    code = ("import os; from xcomp.backends import get_backend; get_backend('cpu'); "
            "print(os.environ['TVM_THREAD_POOL_SPIN_COUNT'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == (user_value or str(tvm_compat.SPIN_COUNT))


def test_stack_without_source_search_is_inspect_s_stack(tmp_path):
    """tensor_intrinsics() imports TVM's intrinsics with inspect.stack() replaced (backends/tvm_compat.py). The
    TVMScript parser reads each frame's object, file, line, function and code line: the replacement gives the same,
    here inside an import, whose `<frozen importlib._bootstrap>` frames have no file on disk."""
    import importlib
    import sys

    (tmp_path / "stacks_at_import.py").write_text(
        "import inspect\n"
        "from xcomp.backends import tvm_compat\n"
        "STACKS = [take() for take in (inspect.stack, tvm_compat._stack_without_source_search)]\n")
    sys.path.insert(0, str(tmp_path))
    try:
        theirs, ours = importlib.import_module("stacks_at_import").STACKS
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("stacks_at_import", None)

    def fields(stack):
        return [(i.frame, i.filename, i.lineno, i.function, i.code_context, i.index) for i in stack]

    assert any(i.filename.startswith("<frozen") for i in theirs)
    assert fields(ours) == fields(theirs)

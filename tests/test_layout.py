"""The package layout promised to users: top-level folders import as xcomp subpackages."""

import importlib

import pytest


@pytest.mark.parametrize(
    "name",
    ["xcomp.frontends", "xcomp.schedules", "xcomp.backends", "xcomp.backends.cpu", "xcomp.backends.cuda",
     "xcomp.backends.rocm", "xcomp.costmodel"],
)
def test_subpackage_imports(name):
    assert importlib.import_module(name).__name__ == name


def test_host_backend_describes_this_cpu():
    from xcomp.backends import get_backend

    spec = get_backend("cpu").spec
    assert spec.kind == "cpu" and spec.cores >= 1 and spec.simd_width in (4, 8, 16)
    assert spec.peak() > 0 and len(spec.fingerprint()) == 16

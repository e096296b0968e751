"""Named variants of TVM's default TIR pipeline: `tvm.compile` takes a TIR pipeline only by registered name."""

from __future__ import annotations


def derived_pipeline(name: str, host_passes=lambda: [], device_passes=lambda: [], first_passes=lambda: []) -> str:
    """Register (once) TVM's default TIR pipeline with `first_passes()` run before all of it, `host_passes()`
    before its host finalization and `device_passes()` before its device finalization; returns the name to pass
    as tvm.compile's tir_pipeline."""
    from tvm.ir import transform
    from tvm.tirx import compilation_pipeline

    if name not in compilation_pipeline.PIPELINE_MAP:
        default = compilation_pipeline.PIPELINE_MAP["s_tir"]

        def pipeline():
            passes, finalize_host, finalize_device = default()
            first = first_passes()
            return (transform.Sequential([*first, passes]) if first else passes,
                    lambda: transform.Sequential([*host_passes(), finalize_host()]),
                    lambda: transform.Sequential([*device_passes(), finalize_device()]))

        compilation_pipeline.PIPELINE_MAP[name] = pipeline
    return name

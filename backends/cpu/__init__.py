"""CPU backend: LLVM for the host (detected) or for a named CPU / triple (cross-compiled, not run here)."""

from __future__ import annotations

from ..base import Backend, HardwareSpec
from .detect import describe_cpu, host_cpu


class CPUBackend(Backend):
    name = "cpu"

    def __init__(self, spec: HardwareSpec, is_host: bool):
        super().__init__(spec)
        self.is_host = is_host

    @classmethod
    def from_arch(cls, arch: str | None) -> "CPUBackend":
        """arch: None (this host), an LLVM CPU name ("skylake-avx512"), or a triple ("aarch64-linux-gnu")."""
        host = host_cpu()
        if not arch:
            return cls(host, is_host=True)
        if arch.count("-") >= 2:  # a target triple
            return cls(describe_cpu(mcpu="generic", triple=arch), is_host=False)
        spec = describe_cpu(mcpu=arch, triple=host.triple)
        return cls(spec, is_host=arch == host.arch)

    def target(self):
        import tvm

        attrs = {"kind": "llvm", "mcpu": self.spec.arch, "mtriple": self.spec.triple,
                 "num-cores": self.spec.cores}
        mattr = []
        if self.spec.simd_width == 16:  # our templates emit 512-bit vectors: let LLVM keep them whole
            mattr.append("-prefer-256-bit")
        if self.spec.triple.startswith("x86_64") and self.spec.simd_width >= 8:
            # no gathers from LLVM's own vectorizer: with them it gave wrong numbers for loops of one vector's
            # length, on AVX2 and AVX-512 parts alike (docs/decisions/avx512-width.md)
            mattr.append("+prefer-no-gather")
        if mattr:
            attrs["mattr"] = mattr
        return tvm.target.Target(attrs)

    def compile(self, mod, **kwargs):
        from ..tir_pipeline import derived_pipeline
        from .param_alignment import params_aligned_to_elements
        from .stack_buffers import keep_small_buffers_on_stack

        pipeline = derived_pipeline("xcomp_cpu", first_passes=lambda: [params_aligned_to_elements()],
                                    host_passes=lambda: [keep_small_buffers_on_stack()])
        return super().compile(mod, tir_pipeline=pipeline, **kwargs)

    def available(self) -> bool:
        return True

    def can_run(self) -> bool:
        """Code for a named CPU runs here when this host has every ISA feature it uses."""
        if self.is_host:
            return True
        host = host_cpu()
        return host.triple.split("-")[0] == self.spec.triple.split("-")[0] and set(self.spec.features) <= set(
            host.features
        )

    def measured_roofs(self) -> dict | None:
        if not self.can_run():
            return None
        from .roofs import measured_roofs

        return measured_roofs(self)

    def can_link_here(self) -> bool:
        return self.spec.triple.split("-")[0] == host_cpu().triple.split("-")[0]

    def device(self):
        import tvm

        return tvm.cpu(0)

    @property
    def target_string(self) -> str:
        return "cpu" if self.is_host else f"cpu:{self.spec.arch if self.spec.arch != 'generic' else self.spec.triple}"

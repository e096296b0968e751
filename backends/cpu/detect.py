"""Describe a CPU as a HardwareSpec: the host (detected) or a named part (cross-compilation)."""

from __future__ import annotations

import functools
import os

from ..base import HardwareSpec, MatrixCoreShape

# A core's inner-loop limits, alike on every x86 core since Haswell / Zen 2 (and big ARM cores): two FMA pipes,
# two vector loads per cycle, an FMA result ready four cycles after issue.
FMA_PIPES, LOAD_PORTS, FMA_LATENCY = 2, 2, 4
# Cache sizes where the host does not say (no sysfs entries): a typical L1d and a small L2, so tiles sized from
# them fit any recent core. A named CPU gets a typical server core's. The L3 stays unknown (0) in both, which
# assumes no weights stay cached.
HOST_FALLBACK_CACHES = (32 * 1024, 256 * 1024)
NAMED_CPU_CACHES = (32 * 1024, 1024 * 1024, 0)
# The L1d's ways where the host does not say, and for a named CPU: the fewest of the x86 server cores xcomp has
# met (Zen 3 and 4: 8; Intel's since Ice Lake: 12).
FALLBACK_L1_WAYS = 8
CPUINFO, CPUFREQ_MAX = "/proc/cpuinfo", "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"
CLOCK_STEP_MHZ, FALLBACK_MHZ = 100, 2000.0


def _host_triple() -> str:
    import tvm

    triple = tvm.target.codegen.llvm_get_system_triple()
    # TVM's wheel reports its build toolchain's vendor ("x86_64-conda-linux-gnu"); normalise it.
    arch = triple.split("-")[0]
    return f"{arch}-unknown-linux-gnu" if "linux" in triple else triple


def _cpuinfo_field(name: str) -> str | None:
    """The first value of `name` in /proc/cpuinfo, or None where it has none."""
    try:
        with open(CPUINFO) as f:
            for line in f:
                if line.startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model_name() -> str | None:
    """The CPU's marketing name from /proc/cpuinfo ('Intel(R) Xeon(R) Platinum 8580'), or None where it has none."""
    return _cpuinfo_field("model name")


def _cpu_mhz() -> float:
    """The clock a core's peak is figured at: the highest its frequency driver lets it run, or without one (a VM)
    /proc/cpuinfo's figure, there the fixed TSC clock. Rounded to CLOCK_STEP_MHZ, since the peak is part of the
    hardware fingerprint: /proc/cpuinfo's figure follows the load where cores scale their clock, and differs by a
    few kHz between VMs of one kind, and neither may split one machine's tuning records."""
    try:
        with open(CPUFREQ_MAX) as f:
            mhz = int(f.read()) / 1000.0  # kHz
    except (OSError, ValueError):
        mhz = 0.0
    mhz = mhz or float(_cpuinfo_field("cpu MHz") or 0.0)
    return round(mhz / CLOCK_STEP_MHZ) * CLOCK_STEP_MHZ or FALLBACK_MHZ


def _data_caches() -> dict:
    """{level: (bytes, ways)} of cpu0's data and unified caches, from sysfs; empty where it has none."""
    caches = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            path = os.path.join(base, entry)
            if not entry.startswith("index"):
                continue
            with open(os.path.join(path, "level")) as f:
                level = int(f.read())
            with open(os.path.join(path, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(path, "size")) as f:
                text = f.read().strip()
            if kind == "Instruction":
                continue
            mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1], 1)
            try:
                with open(os.path.join(path, "ways_of_associativity")) as f:
                    ways = int(f.read())
            except (OSError, ValueError):
                ways = 0
            caches[level] = (int(text.rstrip("KMG")) * mult, ways)
    except OSError:
        pass
    return caches


def usable_cores() -> int:
    """Physical cores this process may run on: SMT siblings share one core's FMA units, so they count once."""
    try:
        cpus = os.sched_getaffinity(0)
    except AttributeError:
        return os.cpu_count() or 1
    cores = set()
    for cpu in cpus:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topology}/physical_package_id") as f, open(f"{topology}/core_id") as g:
                cores.add((f.read().strip(), g.read().strip()))
        except OSError:
            return len(cpus)
    return len(cores) or len(cpus)


_INTERESTING = ("avx2", "fma", "avx512f", "avx512bw", "avx512vnni", "avxvnni", "amx-tile", "amx-bf16",
                "avx512bf16", "avx512fp16", "neon", "sve", "dotprod", "sse4.2")


def describe_cpu(mcpu: str | None = None, triple: str | None = None) -> HardwareSpec:
    """The host when mcpu and triple are None; otherwise a named CPU that may not be this one."""
    import tvm

    host = mcpu is None and triple is None
    triple = triple or _host_triple()
    mcpu = mcpu or tvm.target.codegen.llvm_get_system_cpu()
    if not tvm.target.codegen.llvm_is_valid_cpu(mcpu, triple):
        from xcomp.errors import TargetError

        raise TargetError(f"unknown CPU {mcpu!r} for {triple} (try e.g. cpu:skylake-avx512, cpu:znver4)")
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "mtriple": triple})
    feats = set(tvm.target.codegen.llvm_get_cpu_features(target))
    features = tuple(f for f in _INTERESTING if f in feats)

    # AVX-512 parts that LLVM marks prefer-256-bit still run 512-bit FMAs at full rate on every server core we
    # measured (docs/decisions/avx512-width.md); the target turns the preference off.
    if "avx512f" in feats:
        lanes, registers = 16, 32
    elif "avx2" in feats or "avx" in feats:
        lanes, registers = 8, 16
    elif "neon" in feats or triple.startswith("aarch64"):
        lanes, registers = 4, 32
    else:  # SSE: 128-bit
        lanes, registers = 4, 16
    matrix = []
    if "avx512vnni" in feats or "avxvnni" in feats:
        matrix.append(MatrixCoreShape("vnni.vpdpbusd", 1, lanes, 4, "int8", "int32"))
    if "amx-tile" in feats:
        matrix.append(MatrixCoreShape("amx.tdpbf16ps", 16, 16, 32, "bfloat16", "float32"))

    cores = usable_cores() if host else 1
    ghz = _cpu_mhz() / 1000.0 if host else 2.0
    has_fma = "fma" in feats or "neon" in feats
    fp32_peak = cores * ghz * 1e9 * lanes * (2 if has_fma else 1) * FMA_PIPES
    if host:
        found = _data_caches()
        (l1, l1_ways), (l2, _), (l3, _) = (found.get(level, (0, 0)) for level in (1, 2, 3))
        caches = (l1 or HOST_FALLBACK_CACHES[0], l2 or HOST_FALLBACK_CACHES[1], l3)
        l1_ways = l1_ways or FALLBACK_L1_WAYS
    else:
        caches, l1_ways = NAMED_CPU_CACHES, FALLBACK_L1_WAYS
    return HardwareSpec(
        name=f"{mcpu} ({cores} cores)" if host else mcpu,
        kind="cpu",
        arch=mcpu,
        cores=cores,
        simd_width=lanes,
        vector_bytes=lanes * 4,
        vector_registers=registers,
        cache_bytes=caches,
        l1_ways=l1_ways,
        matrix_cores=tuple(matrix),
        peak_flops={"float32": fp32_peak},
        # A rough per-socket figure; reports measure this machine's own (Backend.measured_roofs, roofs.py).
        mem_bandwidth=20e9 if host else 0.0,
        features=features,
        triple=triple,
        fma_pipes=FMA_PIPES,
        load_ports=LOAD_PORTS,
        fma_latency=FMA_LATENCY,
    )


@functools.lru_cache(maxsize=1)
def host_cpu() -> HardwareSpec:
    """This machine's CPU (detected once per process)."""
    return describe_cpu()

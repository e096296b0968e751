"""Number and label formatting shared by the Markdown, HTML and terminal renderings."""

from __future__ import annotations

PREDICTED = "predicted"


def ms(value) -> str:
    if value is None:
        return "-"
    if value < 0.01:
        return f"{value * 1e3:.3g} µs"
    if value < 10:
        return f"{value:.3f} ms"
    return f"{value:.1f} ms"


def si(value, unit="") -> str:
    if value is None:
        return "-"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}".strip()


def pct(value) -> str:
    return "-" if value is None else f"{value:.1f}%"


def ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def check(entry_check) -> str:
    """A runner's output check for the tables: the max |diff| and its reference, flagged when that reference's
    outputs are one repeated value."""
    if not entry_check:
        return "-"
    weak = "; uniform reference" if entry_check.get("uniform_reference") else ""
    return f"{entry_check['max_abs_diff']:.2e} ({entry_check['reference']}{weak})"


def target_latency(entry) -> tuple:
    """(latency ms, predicted?) of a target entry: the measured median, or the roofline prediction."""
    if entry.get("status") == "measured":
        return entry["latency"]["median_ms"], False
    return entry["predicted"]["latency_ms"], True


def origin_text(entry) -> str:
    origin = entry.get("origin", {})
    if origin.get("kind") == "results file":
        return f"measured on {origin.get('hostname') or '?'} (from {origin.get('file')})"
    if origin.get("kind") == "predicted":
        return "predicted from the HardwareSpec roofline (calibrated where measured runs exist)"
    return "measured in this run"


def target_label(entry) -> str:
    """'cpu', 'cuda:sm_90 (predicted)', 'rocm:gfx942 @ gpu-host' -- predictions always say so."""
    name = entry["target"]
    if entry.get("status") != "measured":
        return f"{name} ({PREDICTED})"
    origin = entry.get("origin", {})
    if origin.get("kind") == "results file":
        return f"{name} @ {origin.get('hostname') or 'other machine'}"
    return name


def baseline_label(entry) -> str:
    origin = entry.get("origin", {})
    where = f" @ {origin.get('hostname') or 'other machine'}" if origin.get("kind") == "results file" else ""
    return f"{entry['name']} ({entry.get('device', 'cpu')}){where}"


def fp32_peak(hardware: dict):
    """A HardwareSpec dict's fp32 FLOP/s (the plain vector rate, see backends/catalog.py), or None."""
    return hardware.get("peak_flops", {}).get("float32")


def spec_summary(hardware: dict) -> str:
    peak = fp32_peak(hardware)
    bw = hardware.get("mem_bandwidth")
    return f"{hardware.get('name')}: fp32 peak {si(peak, 'FLOP/s')}, memory {si(bw, 'B/s') if bw else 'unknown'}"


def roofs(entry: dict) -> dict:
    """What a target entry's rates are set against: the roofs this run measured on its hardware where it did
    (entry["roofs"], see Backend.measured_roofs), else its HardwareSpec's nominal figures.
    {"source": "measured" | "spec", "peak": fp32 FLOP/s or None, "bandwidth": B/s or 0}."""
    measured = entry.get("roofs")
    if measured:
        return {"source": "measured", "peak": measured["peak_flops"].get("float32"),
                "bandwidth": measured.get("mem_bandwidth") or 0}
    hardware = entry["hardware"]
    return {"source": "spec", "peak": fp32_peak(hardware), "bandwidth": hardware.get("mem_bandwidth") or 0}


def roofs_summary(entry: dict) -> str:
    """'NAME: measured fp32 peak 120 GFLOP/s, memory 16 GB/s (spec: ...)', or spec_summary's line."""
    r = roofs(entry)
    if r["source"] == "spec":
        return spec_summary(entry["hardware"])
    raised = entry["roofs"].get("peak_raised_by")
    peak = si(r["peak"], "FLOP/s") + (f" (raised to {raised['runner']}'s rate: measured "
                                      f"{si(raised['measured_peak'], 'FLOP/s')})" if raised else "")
    return (f"{entry['hardware'].get('name')}: measured fp32 peak {peak}, memory "
            f"{si(r['bandwidth'], 'B/s')} (spec: {spec_summary(entry['hardware']).split(': ', 1)[1]})")

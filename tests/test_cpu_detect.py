"""The host's HardwareSpec: the same machine gets the same fingerprint in every process, so its tuning records
stay its own."""

from xcomp.backends.cpu import detect


def _host(tmp_path, monkeypatch, mhz: float, max_khz: int | None = None):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: Test CPU\ncpu MHz\t\t: {mhz}\n")
    monkeypatch.setattr(detect, "CPUINFO", str(cpuinfo))
    cpufreq = tmp_path / "cpuinfo_max_freq"
    if max_khz is not None:
        cpufreq.write_text(f"{max_khz}\n")
    monkeypatch.setattr(detect, "CPUFREQ_MAX", str(cpufreq))
    return detect.describe_cpu()


def test_a_scaling_clock_changes_neither_the_peak_nor_the_fingerprint(tmp_path, monkeypatch):
    # /proc/cpuinfo shows a core's clock of the moment where a frequency driver scales it
    idle, busy = (_host(tmp_path, monkeypatch, mhz, max_khz=3_700_000) for mhz in (1497.312, 3712.904))
    assert idle.fingerprint() == busy.fingerprint()
    assert idle.peak() == busy.peak() == idle.cores * 3.7e9 * idle.simd_width * 2 * detect.FMA_PIPES


def test_vms_of_one_kind_share_a_fingerprint(tmp_path, monkeypatch):
    # without a frequency driver the figure is the TSC clock, measured at boot a few kHz apart
    one, other = (_host(tmp_path, monkeypatch, mhz) for mhz in (2596.138, 2596.150))
    assert one.fingerprint() == other.fingerprint()
    assert _host(tmp_path, monkeypatch, 3096.150).fingerprint() != one.fingerprint()

"""specjax.platform.hardware reads /proc/cpuinfo's fields (checked on a written sample of that
file), and the CPU kernels pick their prefetch form from it."""

import pytest

from specjax.models import kernels
from specjax.platform import hardware

SAMPLE = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 167
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu avx512f

processor\t: 1
vendor_id\t: GenuineIntel
"""


def test_cpuinfo_first_matching_line(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(SAMPLE)
    assert hardware.cpuinfo("vendor_id", path=path) == "GenuineIntel"
    assert hardware.cpuinfo("processor", path=path) == "0"
    # "model\t" must not match "model name": the tab after the key tells them apart.
    assert hardware.cpuinfo("model\t", path=path) == "167"
    assert hardware.cpuinfo("model name", "flags", path=path) == "Intel(R) Xeon(R) Processor"
    assert hardware.cpuinfo("bogomips", path=path) == ""
    assert hardware.cpuinfo("vendor_id", path=tmp_path / "missing") == ""


def test_cpu_name_carries_family_and_model(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(SAMPLE)
    assert hardware.cpu_name(path) == "Intel(R) Xeon(R) Processor (family 6 model 167)"
    path.write_text("model name\t: Some CPU\n")
    assert hardware.cpu_name(path) == "Some CPU"


def test_kernel_prefetch_level_follows_vendor_and_override(monkeypatch, tmp_path):
    """The packed kernel's prefetch form: the vendor's default, or the environment's choice;
    a value outside the allowed ones is refused by name (not silently replaced)."""
    monkeypatch.delenv("SPECJAX_KERNEL_PREFETCH", raising=False)
    for vendor, level in (("GenuineIntel", "l2"), ("AuthenticAMD", "l1"), ("", "l1")):
        monkeypatch.setattr(hardware, "cpuinfo", lambda *keys, vendor=vendor, **kw: vendor)
        assert kernels.prefetch_level() == level
    monkeypatch.setenv("SPECJAX_KERNEL_PREFETCH", "L1")
    assert kernels.prefetch_level() == "l1"
    monkeypatch.setenv("SPECJAX_KERNEL_PREFETCH", "l3")
    with pytest.raises(ValueError, match="SPECJAX_KERNEL_PREFETCH.*'l1', 'l2'.*'l3'"):
        kernels.prefetch_level()


def test_prefill_dot_follows_kernel_form_and_override(monkeypatch):
    """A prefill keeps the kernel where its AVX-512 form runs (it measured 2.5x faster than
    XLA's dot there) and takes XLA's dot under the AVX2 form; the environment can choose either,
    and ``quant.in_bulk`` follows the choice only inside ``bulk_rows``."""
    from specjax.models import quant

    monkeypatch.delenv("SPECJAX_PREFILL_DOT", raising=False)
    for flags, form in (("fpu avx2 avx512f avx512bw", "kernel"), ("fpu avx2 fma", "xla"),
                        ("", "xla"), ("avx512fp16", "xla")):
        monkeypatch.setattr(hardware, "cpuinfo", lambda *keys, flags=flags, **kw: flags)
        assert kernels.prefill_dot() == form
        assert not quant.in_bulk()
        with quant.bulk_rows():
            assert quant.in_bulk() == (form == "xla")
    monkeypatch.setenv("SPECJAX_PREFILL_DOT", "Kernel")
    assert kernels.prefill_dot() == "kernel"
    monkeypatch.setenv("SPECJAX_PREFILL_DOT", "onednn")
    with pytest.raises(ValueError, match="SPECJAX_PREFILL_DOT.*'kernel', 'xla'.*'onednn'"):
        kernels.prefill_dot()

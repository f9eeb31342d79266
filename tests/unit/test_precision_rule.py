"""The default precision rule on given /proc/cpuinfo texts: bf16 only where the hardware has it natively."""

from __future__ import annotations

from mountctl.pytorch.training.trainer import cpu_flags, precision_rule

# Flag lines as the kernel prints them (trimmed): an AVX-512 Xeon without BF16 (the machine),
# a Cooper Lake / Sapphire Rapids style CPU with AVX512_BF16 and AMX, and an ARM core.
SKYLAKE = ("processor\t: 0\nvendor_id\t: GenuineIntel\n"
           "flags\t\t: fpu sse2 avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni\n\n"
           "processor\t: 1\nflags\t\t: fpu sse2 avx avx2 avx512f\n")
SAPPHIRE = "processor\t: 0\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
AMX_ONLY = "flags\t\t: avx2 amx_bf16 amx_tile\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes crc32\n"


def test_avx512_without_native_bf16_trains_in_fp32():
    assert precision_rule(cuda=False, flags=cpu_flags(SKYLAKE)) == "32-true"


def test_avx512_bf16_trains_in_bf16_mixed():
    assert precision_rule(cuda=False, flags=cpu_flags(SAPPHIRE)) == "bf16-mixed"


def test_amx_bf16_alone_counts_as_native_bf16():
    assert precision_rule(cuda=False, flags=cpu_flags(AMX_ONLY)) == "bf16-mixed"


def test_cpu_without_flags_line_trains_in_fp32():
    assert precision_rule(cuda=False, flags=cpu_flags(ARM)) == "32-true"
    assert precision_rule(cuda=False, flags=cpu_flags("")) == "32-true"


def test_gpu_uses_fp16_mixed_without_bf16_support():
    assert precision_rule(cuda=True, flags=cpu_flags(SAPPHIRE), cuda_bf16=False) == "16-mixed"


def test_gpu_with_bf16_support_uses_bf16_mixed():
    assert precision_rule(cuda=True, flags=frozenset(), cuda_bf16=True) == "bf16-mixed"

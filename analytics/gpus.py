"""Peak dense tensor-core throughput and memory of the GPU models users train on.

Dense (no 2:4 sparsity) fp16/bf16 numbers from the vendor datasheets; V100 has no bf16.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class GpuModel:
    name: str
    """Normalised name, as the parsers' ``gpu_model`` column holds it."""
    peak_tflops_fp16: float
    """Dense fp16 tensor-core peak, TFLOP/s."""
    peak_tflops_bf16: float | None
    """Dense bf16 peak, TFLOP/s (None: no bf16 tensor cores)."""
    memory_gib: float
    """Memory, GiB (2**30 bytes), as the product name says."""
    source: str
    """The vendor datasheet the peaks come from."""


# https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf
V100_SXM2_FP16_DENSE = 125.0
# https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
A100_SXM4_BF16_DENSE = 312.0
# https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet (H100 SXM5)
H100_SXM_BF16_DENSE = 989.0
# Same datasheet, H100 PCIe
H100_PCIE_BF16_DENSE = 756.0
# Same datasheet, H100 NVL: 1,671 TFLOP/s with sparsity, per GPU
H100_NVL_BF16_DENSE = 835.5

_V100 = (
    "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
)
_A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"

GPUS: dict[str, GpuModel] = {
    g.name: g
    for g in (
        GpuModel(
            name="V100-SXM2-16GB",
            peak_tflops_fp16=V100_SXM2_FP16_DENSE,
            peak_tflops_bf16=None,
            memory_gib=16,
            source=_V100,
        ),
        GpuModel(
            name="V100-SXM2-32GB",
            peak_tflops_fp16=V100_SXM2_FP16_DENSE,
            peak_tflops_bf16=None,
            memory_gib=32,
            source=_V100,
        ),
        GpuModel(
            name="V100-PCIE-32GB", peak_tflops_fp16=112.0, peak_tflops_bf16=None, memory_gib=32, source=_V100
        ),
        GpuModel(
            name="A100-SXM4-40GB",
            peak_tflops_fp16=A100_SXM4_BF16_DENSE,
            peak_tflops_bf16=A100_SXM4_BF16_DENSE,
            memory_gib=40,
            source=_A100,
        ),
        GpuModel(
            name="A100-SXM4-80GB",
            peak_tflops_fp16=A100_SXM4_BF16_DENSE,
            peak_tflops_bf16=A100_SXM4_BF16_DENSE,
            memory_gib=80,
            source=_A100,
        ),
        GpuModel(
            name="A100-PCIE-40GB",
            peak_tflops_fp16=A100_SXM4_BF16_DENSE,
            peak_tflops_bf16=A100_SXM4_BF16_DENSE,
            memory_gib=40,
            source=_A100,
        ),
        GpuModel(
            name="A100-PCIE-80GB",
            peak_tflops_fp16=A100_SXM4_BF16_DENSE,
            peak_tflops_bf16=A100_SXM4_BF16_DENSE,
            memory_gib=80,
            source=_A100,
        ),
        GpuModel(
            name="H100-SXM",
            peak_tflops_fp16=H100_SXM_BF16_DENSE,
            peak_tflops_bf16=H100_SXM_BF16_DENSE,
            memory_gib=80,
            source=_H100,
        ),
        GpuModel(
            name="H100-PCIE",
            peak_tflops_fp16=H100_PCIE_BF16_DENSE,
            peak_tflops_bf16=H100_PCIE_BF16_DENSE,
            memory_gib=80,
            source=_H100,
        ),
        GpuModel(
            name="H100-NVL",
            peak_tflops_fp16=H100_NVL_BF16_DENSE,
            peak_tflops_bf16=H100_NVL_BF16_DENSE,
            memory_gib=94,
            source=_H100,
        ),
    )
}


def peak_tflops(gpu_model: str | None, precision: str | None = "fp16") -> float | None:
    """Dense peak TFLOP/s of ``gpu_model`` at ``precision`` (fp16/bf16); None when unknown.

    None for fp32 too: an fp32 run does not use the half-precision tensor-core peak, and an MFU
    against it would understate the run (the table holds no fp32/TF32 peaks).
    """
    gpu = GPUS.get(gpu_model or "")
    if gpu is None:
        return None
    if precision == "bf16":
        return gpu.peak_tflops_bf16
    if precision in ("fp16", None):
        return gpu.peak_tflops_fp16
    return None

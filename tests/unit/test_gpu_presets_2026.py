"""The 2026 accelerator presets (issue 21 §3): datasheet numbers as published, FP8 without FP8 tensor cores,
and estimates that say they are not resolved where no kernel data exist."""
from __future__ import annotations

import pytest

from llmexplore import presets
from llmexplore.errors import SpecError
from llmexplore.models.step.engine import Deployment, not_resolved_reason
from llmexplore.specs import Hardware

NEW = ("b300", "gb300", "mi325x", "mi355x", "a100-80gb", "l40s")


@pytest.mark.parametrize("name, mib, GiB", [
    ("b300", 275_040, 268.59),    # AIConfigurator b300_sxm.yaml: 275040MiB reported by nvidia-smi
    ("gb300", 284_208, 277.55),   # AIConfigurator gb300.yaml: 284208MiB reported by nvidia-smi
    ("a100-80gb", 81_920, 80.0),  # modal-labs/modal-client#2797: 'A100 80GB: 81920MiB'
    ("l40s", 46_068, 44.99),      # modal-labs/modal-client#2797: 'L40S: 46068MiB'
])
def test_memory_is_what_the_driver_reports(name, mib, GiB):
    assert presets.hardware(name).hbm_GiB == pytest.approx(mib / 1024, abs=0.005) == pytest.approx(GiB, abs=0.005)


def test_dense_peaks_are_half_the_sparse_datasheet_numbers():
    # datasheets quote 2:4-sparse peaks: B300 BF16 4.5 / FP8 9 PF sparse; L40S FP8 1,466 sparse (its BF16 row
    # reads '362.05 | 733*', not exactly double: the dense number is taken as printed); A100 BF16 624 sparse;
    # MI325X FP8 5,229.8 with sparsity
    assert presets.hardware("l40s").bf16_TFLOPS == 362.05
    for name, field, sparse in (("b300", "bf16_TFLOPS", 4500), ("b300", "fp8_TFLOPS", 9000),
                                ("l40s", "fp8_TFLOPS", 1466),
                                ("a100-80gb", "bf16_TFLOPS", 624), ("mi325x", "fp8_TFLOPS", 5229.8)):
        assert getattr(presets.hardware(name), field) == pytest.approx(sparse / 2, rel=0.002), (name, field)


def test_fp4_only_where_the_tensor_cores_have_it():
    assert [n for n in NEW if presets.hardware(n).has_fp4] == ["b300", "gb300", "mi355x"]
    for n in ("mi325x", "a100-80gb", "l40s"):
        with pytest.raises(SpecError, match=f"{n} has no FP4 tensor cores"):
            Deployment.build("llama-3-8b", n, 1, weight_dtype="fp4")


def test_fp8_weights_on_ampere_run_as_w8a16():
    """The A100 has no FP8 tensor cores: FP8 weights are read as FP8 bytes and multiplied in BF16 (vLLM's Marlin
    FP8 path), so their GEMMs get the BF16 peak and half the weight bytes."""
    hw = presets.hardware("a100-80gb")
    assert not hw.has_fp8 and hw.peak_TFLOPS("fp8") == hw.bf16_TFLOPS == 312
    d8, d16 = (Deployment.build("llama-3-70b", "a100-80gb", 4, weight_dtype=w) for w in ("fp8", "bf16"))
    assert sum(d8.weight_bytes("TP").values()) < 0.6 * sum(d16.weight_bytes("TP").values())
    with pytest.raises(SpecError, match="fp8_TFLOPS must be 0 \\(no FP8 tensor cores\\) or in"):
        Hardware(**{**{f: getattr(hw, f) for f in Hardware.field_names()}, "fp8_TFLOPS": 1e-9})


def test_gpus_without_nvlink_or_fp8_keep_their_own_links():
    assert presets.link(presets.hardware("l40s").scale_up_link).achievable_GBps < 32  # PCIe, no NVLink
    assert presets.hardware("gb300").scale_up_size == 72 and presets.hardware("b300").scale_up_size == 8
    assert presets.link(presets.hardware("b300").scale_out_link).line_rate_GBps == 100  # 800 Gb/s


@pytest.mark.parametrize("name", NEW)
def test_no_kernel_data_means_not_resolved_never_another_gpus_curves(name):
    why = not_resolved_reason(Deployment.build("llama-3-8b", name, 1))
    assert why.startswith(f"not resolved: {name} has no kernel data for the GEMMs, decode attention, prefill "
                          "attention of llama-3-8b")
    assert Deployment.build("llama-3-8b", name, 1).kernels is None

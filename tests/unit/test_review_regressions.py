"""Regression tests for two defects found in review: DOP core query bytes and the HBM capacity convention.


"""

import pytest

from llmexplore.models.step import decode as att
from llmexplore.models.step.engine import Deployment

HQ_DS, RKV, DR = 128, 512, 64


# ---- suspect 1: DOP attention core reads the queries of the whole batch ---------------------------------------
@pytest.mark.parametrize("B", [8, 64, 256])
def test_dop_core_query_output_bytes_like_dpa(B):
    # docs/models.md §3.3 attention-core table has one row "DPA, DOP"; attention.py's own docstring: DOP runs a
    # "batch-sharded attention core (all heads of the owned sequences)" after the heads->batch AllToAll.
    # The worst rank therefore reads the absorbed queries and writes the latent outputs of ceil(B/T) sequences
    # for all 128 heads: m0 = q ceil(B/T) h_q (576 + 512) b_a. DPA gets exactly this; DOP gets T times more.
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")
    n = -(-B // 8)
    expected_m0 = n * HQ_DS * (RKV + DR + RKV) * 2
    assert float(att.core_coefficients(dep, B, "DPA")["m0"]) == expected_m0
    assert float(att.core_coefficients(dep, B, "DOP")["m0"]) == expected_m0


# ---- suspect 2: HBM capacity read as 1e9 B although the "80GB" of an H100 is 80 GiB ---------------------------
def test_h100_usable_hbm_uses_physical_capacity():
    # data/hardware.yaml stores hbm_GiB: 80 "in 1e9 B as marketed" and Deployment.usable_B = 0.9 * 80e9 B.
    # The H100 SXM "80GB" part carries 80 GiB: AIConfigurator systems/h100_sxm.yaml lists 85,899,345,920 B
    # (PEERS.md §3.2) and nvidia-smi reports 81,559 MiB = 85.52e9 B. vLLM's gpu_memory_utilization = 0.9
    # multiplies the total reported by the driver, so usable should be ~0.9 * 85.5e9 = 77.0e9 B, not 72.0e9 B
    # (-6.9 %; the same ~7 % applies to H200 141 -> 150.7e9 B by nvidia-smi 143,771 MiB, and GB200, whose own
    # source line says nvidia-smi shows 189,471 MiB = 198.7e9 B while hbm_GiB is 186).
    dep = Deployment.build("llama-3-70b", "h100-sxm", 8)
    assert dep.usable_B == pytest.approx(0.9 * 81_559 * 2**20, rel=0.01)

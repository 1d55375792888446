"""Alpha-beta collectives (docs/models.md §1.2) and the order statistics of models/step/stats.py."""

import numpy as np
import pytest

from llmexplore import presets
from llmexplore.errors import SpecError
from llmexplore.models.step.collectives import (Fabric, allgather_s, allreduce_s, alltoall_s, alpha_s,
                                           reducescatter_s, sendrecv_s)
from llmexplore.models.step.stats import expected_max_std_normal
from llmexplore.specs import Link

NVL = presets.link("nvlink4")  # 370 GB/s busbw, alpha = 8 us + 0.5 us (p-1)
IB = presets.link("ib-ndr400")  # 46 GB/s, alpha = 20 us + 1 us (p-1)


# ---- collectives -------------------------------------------------------------------------------------------

def one_node():
    return Fabric(scale_up=NVL, scale_out=IB, gpus_per_node=8)


def test_alpha_linear_in_ranks():
    assert alpha_s(1, NVL) == 0.0
    assert alpha_s(2, NVL) == pytest.approx(8.5e-6)
    assert alpha_s(8, NVL) == pytest.approx((8 + 0.5 * 7) * 1e-6)


N = 64 * 8192 * 2.0  # bytes: 64 tokens x H=8192 x BF16


@pytest.mark.parametrize("p", [2, 4, 8])
def test_flat_collective_formulas(p):
    # NVIDIA/nccl-tests doc/PERFORMANCE.md bus-bandwidth conventions (docs/models.md §1.2 table)
    fab, B, a = one_node(), 370e9, (8 + 0.5 * (p - 1)) * 1e-6
    assert allreduce_s(N, p, fab) == pytest.approx(a + 2 * (p - 1) / p * N / B, rel=1e-12)
    assert reducescatter_s(N, p, fab) == pytest.approx(a + (p - 1) / p * N / B, rel=1e-12)
    assert allgather_s(N, p, fab) == pytest.approx(a + (p - 1) / p * N / B, rel=1e-12)
    assert alltoall_s(N, p, fab) == pytest.approx(a + (p - 1) / p * N / B, rel=1e-12)


def test_single_rank_communicates_nothing():
    fab = one_node()
    for op in (allreduce_s, allgather_s, reducescatter_s, alltoall_s):
        assert op(N, 1, fab) == 0.0
        assert np.all(op(np.array([0.0, N, 1e12]), 1, fab) == 0.0)


def test_sendrecv_uses_link_alpha_and_bandwidth():
    assert sendrecv_s(1e9, IB) == pytest.approx(20e-6 + 1e9 / 46e9, rel=1e-12)


def test_collectives_broadcast_over_bytes():
    n = np.array([[1e6], [1e8]]) * np.ones((1, 3))
    out = allreduce_s(n, 8, one_node())
    assert out.shape == (2, 3)
    assert out[1, 0] > out[0, 0]


def test_hierarchical_allreduce_is_rs_intra_plus_ar_inter_plus_ag_intra():
    # docs/models.md §1.2: AllReduce ~ RS_intra + AR_inter(n/G) + AG_intra
    #   = 2(G-1)/G n/B_nvl + 2(N-1)/N (n/G)/B_nic + 3 alphas     (G = 8 per node, N = 4 nodes)
    G, Nn, p = 8, 4, 32
    fab = Fabric(scale_up=NVL, scale_out=IB, gpus_per_node=G)
    intra, inter = Fabric(scale_up=NVL), Fabric(scale_up=IB, gpus_per_node=Nn)
    composed = reducescatter_s(N, G, intra) + allreduce_s(N / G, Nn, inter) + allgather_s(N, G, intra)
    assert allreduce_s(N, p, fab) == pytest.approx(composed, rel=1e-12)
    by_hand = (2 * (G - 1) / G * N / 370e9 + 2 * (Nn - 1) / Nn * (N / G) / 46e9
               + 2 * alpha_s(G, NVL) + alpha_s(Nn, IB))
    assert allreduce_s(N, p, fab) == pytest.approx(by_hand, rel=1e-12)


def test_hierarchical_allgather_legs():
    # inter-node leg on n/G among the N same-rail GPUs, then intra-node leg producing n
    G, Nn = 8, 2
    fab = Fabric(scale_up=NVL, scale_out=IB, gpus_per_node=G)
    by_hand = ((Nn - 1) / Nn * (N / G) / 46e9 + alpha_s(Nn, IB) + (G - 1) / G * N / 370e9 + alpha_s(G, NVL))
    assert allgather_s(N, G * Nn, fab) == pytest.approx(by_hand, rel=1e-12)


def test_hierarchical_alltoall_is_slower_leg_when_pipelined():
    # docs/models.md §1.2: max((G-1)/(GN) n/B_nvl, (N-1)/N n/B_nic) when the legs are pipelined (DeepEP-style);
    # latency terms removed here so the bandwidth term is checked exactly
    fast = Link(name="nvl0", kind="scale-up", line_rate_GBps=450, achievable_GBps=370, latency_us=0,
                sources={"*": "test"})
    nic = Link(name="ib0", kind="scale-out", line_rate_GBps=50, achievable_GBps=46, latency_us=0,
               sources={"*": "test"})
    G, Nn = 8, 4
    fab = Fabric(scale_up=fast, scale_out=nic, gpus_per_node=G)
    expected = max((G - 1) / (G * Nn) * N / 370e9, (Nn - 1) / Nn * N / 46e9)
    assert alltoall_s(N, G * Nn, fab) == pytest.approx(expected, rel=1e-12)


def test_groups_within_a_node_never_use_scale_out():
    fab = one_node()
    assert fab.split(8) == (8, 1)
    assert fab.split(16) == (8, 2)
    assert Fabric(scale_up=NVL).split(64) == (64, 1)  # no scale-out link: one flat domain


def test_group_spanning_nodes_unevenly_rejected():
    with pytest.raises(SpecError, match=r"ranks \(12\) spanning nodes must be a multiple of the scale-up "
                                        r"size \(8\)"):
        one_node().split(12)


def test_more_bandwidth_less_time():
    slow = Fabric(scale_up=NVL)
    fast = Fabric(scale_up=NVL.replace(line_rate_GBps=900, achievable_GBps=740))
    for op in (allreduce_s, allgather_s, alltoall_s):
        assert op(N, 8, fast) < op(N, 8, slow)


# ---- expected maximum of T standard normals ----------------------------------------------------------------

@pytest.mark.parametrize("n, z", [(2, 0.5642), (4, 1.0294), (8, 1.4236), (16, 1.7660), (32, 2.0697)])
def test_expected_max_std_normal_table(n, z):
    # docs/models.md §3.3 (z_2 = 1/sqrt(pi) exactly)
    assert expected_max_std_normal(n) == pytest.approx(z, abs=5e-5)


def test_expected_max_limits():
    assert expected_max_std_normal(1) == 0.0
    assert expected_max_std_normal(2) == pytest.approx(1 / np.sqrt(np.pi), abs=1e-9)
    # sqrt(2 ln T) overestimates at small T: 2.04 vs 1.42 for T = 8 (docs/models.md §3.3)
    assert np.sqrt(2 * np.log(8)) == pytest.approx(2.04, abs=0.005)
    assert expected_max_std_normal(8) < np.sqrt(2 * np.log(8))
    zs = [expected_max_std_normal(n) for n in (1, 2, 3, 4, 8, 16, 32, 64)]
    assert all(a < b for a, b in zip(zs, zs[1:]))
    with pytest.raises(ValueError):
        expected_max_std_normal(0)


@pytest.mark.parametrize("n", [2, 8, 32])
def test_expected_max_monte_carlo(n):
    rng = np.random.default_rng(12345)
    samples = rng.standard_normal((200_000, n)).max(axis=1)
    se = samples.std() / np.sqrt(samples.size)  # ~0.0015
    assert abs(samples.mean() - expected_max_std_normal(n)) < 5 * se

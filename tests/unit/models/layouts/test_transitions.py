"""Layout transitions (models/layouts/transitions.py) against the 4x4 oracle tables of docs/models.md §3.4, the per-rank
volumes stated there, the DeepSeek-V3 handoff example, and a brute-force set computation on small cases."""

import itertools
import math

import numpy as np
import pytest

from llmexplore.errors import SpecError
from llmexplore.models.layouts import transitions as tr
from llmexplore.models.step.engine import LAYOUTS, Deployment
from llmexplore.models.step.collectives import alpha_s

PAGE = 16
NONE, DISC, AG, A2A = "none", "discard", "all-gather", "all-to-all"

# docs/models.md §3.4, rows = from, columns = to (TP, CP, DPA, DOP)
WEIGHT_TABLE = {
    "TP": [NONE, AG, AG, NONE],
    "CP": [DISC, NONE, NONE, DISC],
    "DPA": [DISC, NONE, NONE, DISC],
    "DOP": [NONE, AG, AG, NONE],
}
GQA_KV_TABLE = {  # head-sharded regime, T <= h_kv, T | h_kv
    "TP": [NONE, A2A, A2A, A2A],
    "CP": [A2A, NONE, A2A, A2A],
    "DPA": [A2A, A2A, NONE, NONE],
    "DOP": [A2A, A2A, NONE, NONE],
}
MLA_KV_TABLE = {  # replicated-under-TP regime
    "TP": [NONE, DISC, DISC, DISC],
    "CP": [AG, NONE, A2A, A2A],
    "DPA": [AG, A2A, NONE, NONE],
    "DOP": [AG, A2A, NONE, NONE],
}
PAIRS = [(x, y) for x in LAYOUTS for y in LAYOUTS]


def table_entry(table, src, dst):
    return table[src][LAYOUTS.index(dst)]


def K_bytes(dep, B, s):
    """Logical KV bytes of the whole model for B sequences of s tokens (page-rounded)."""
    return B * math.ceil(s / PAGE) * PAGE * dep.model.kv_bytes_per_token(dep.kv_dtype)


# ---- primitive tables --------------------------------------------------------------------------------------

@pytest.mark.parametrize("T", [2, 4, 8])
@pytest.mark.parametrize("src, dst", PAIRS)
def test_gqa_kv_table(T, src, dst):
    dep = Deployment.build("llama-3-70b", "h100-sxm", T)  # h_kv = 8, T | 8
    B, s = 2 * T, 4 * T * PAGE
    t = tr.kv_transition(dep, src, dst, B, s)
    assert t.primitive == table_entry(GQA_KV_TABLE, src, dst)
    K = K_bytes(dep, B, s)
    if t.primitive == A2A:
        # docs/models.md §3.4: per-rank volume (T-1)/T * K/T for every all-to-all, in and out
        assert t.recv_B == pytest.approx((T - 1) / T * K / T, rel=1e-12)
        assert t.send_B == pytest.approx((T - 1) / T * K / T, rel=1e-12)
        assert t.freed_B == pytest.approx((T - 1) / T * K / T, rel=1e-12)
    else:
        assert t.recv_B == t.send_B == t.freed_B == t.time_s == 0.0


@pytest.mark.parametrize("T", [2, 4, 8])
@pytest.mark.parametrize("src, dst", PAIRS)
def test_mla_kv_table(T, src, dst):
    dep = Deployment.build("deepseek-v3", "h200", T, weight_dtype="fp8")
    B, s = 2 * T, 4 * T * PAGE
    t = tr.kv_transition(dep, src, dst, B, s)
    prim = table_entry(MLA_KV_TABLE, src, dst)
    assert t.primitive == prim
    K = K_bytes(dep, B, s)
    if prim == DISC:  # TP -> X keeps its own shard, frees (T-1)/T K
        assert (t.recv_B, t.send_B) == (0.0, 0.0)
        assert t.freed_B == pytest.approx((T - 1) / T * K, rel=1e-12)
        assert t.time_s == 0.0
    elif prim == AG:  # X -> TP receives everything it does not hold
        assert t.recv_B == pytest.approx((T - 1) / T * K, rel=1e-12)
        assert t.freed_B == 0.0
    elif prim == A2A:
        assert t.recv_B == pytest.approx((T - 1) / T * K / T, rel=1e-12)
        assert t.send_B == pytest.approx((T - 1) / T * K / T, rel=1e-12)
    else:
        assert t.moved_B == 0.0 and t.freed_B == 0.0


@pytest.mark.parametrize("model, gpu, T, dtype", [("llama-3-70b", "h100-sxm", 8, "bf16"),
                                                   ("llama-3-70b", "h100-sxm", 4, "bf16"),
                                                   ("deepseek-v3", "h200", 8, "fp8")])
@pytest.mark.parametrize("src, dst", PAIRS)
def test_weight_table(model, gpu, T, dtype, src, dst):
    dep = Deployment.build(model, gpu, T, weight_dtype=dtype)
    t = tr.weight_transition(dep, src, dst)
    prim = table_entry(WEIGHT_TABLE, src, dst)
    assert t.primitive == prim
    m = dep.model
    p = m.attn_params_per_layer
    # shardable attention weights: MLA W_shard = q_b + kv_b + o; GQA (T <= h_kv) all four projections
    w_shard = sum(p.values()) - m.mla_replicated_params_per_layer
    vol = (T - 1) / T * w_shard * dep.b_w * m.layers
    if prim == AG:
        assert t.recv_B == pytest.approx(vol, rel=1e-12)
    elif prim == DISC:
        assert t.freed_B == pytest.approx(vol, rel=1e-12)
        assert t.recv_B == 0.0 and t.time_s == 0.0
    else:
        assert t.recv_B == t.freed_B == t.time_s == 0.0


def test_dsv3_weight_volume_by_hand():
    # docs/models.md §2: W_shard = 171,966,464; TP8 -> CP all-gathers 7/8 of it per layer, FP8, 61 layers
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")
    assert tr.weight_transition(dep, "TP", "CP").recv_B == pytest.approx(7 / 8 * 171_966_464 * 61, rel=1e-12)


# ---- GQA with more ranks than KV heads (docs/models.md §3.4 last paragraph) -------------------------------------

def _kv_cells(dep, B, s):
    """Cell bytes [B, T page residues, h_kv heads] computed independently: pages dealt round-robin."""
    T, h = dep.ranks, dep.model.kv_heads
    n_pg = math.ceil(s / PAGE)
    per = dep.model.kv_bytes_per_token(dep.kv_dtype) / h
    pages = np.array([len(range(r, n_pg, T)) for r in range(T)])
    return np.broadcast_to((pages * PAGE * per)[None, :, None], (B, T, h)).reshape(-1)


def test_gqa_more_ranks_than_kv_heads():
    dep = Deployment.build("llama-3-8b", "h100-sxm", 16)  # h_kv = 8, g = 2 ranks share a head under TP
    T, h, B, s = 16, 8, 20, 16 * PAGE * 3
    K = K_bytes(dep, B, s)
    cells = _kv_cells(dep, B, s)
    own = {lay: tr.ownership(lay, T, B, h, False).reshape(T, -1) for lay in LAYOUTS}
    n_j = np.array([len(range(j, B, T)) for j in range(T)])  # sequences per rank, round-robin: 2,2,2,2,1,...
    # TP -> DPA: rank j needs the other h_kv - 1 heads of its own sequences: V_in = (h_kv-1)/h_kv * n_j/B * K
    v = tr.transfer_volumes(own["TP"], own["DPA"], cells)
    np.testing.assert_allclose(v["recv_B"], (h - 1) / h * n_j / B * K, rtol=1e-12)
    assert v["primitive"] == A2A
    # with B a multiple of T this is docs/models.md's (h_kv-1)/h_kv * K/T
    t = tr.kv_transition(dep, "TP", "DPA", 32, s)
    assert t.recv_B == pytest.approx((h - 1) / h * K_bytes(dep, 32, s) / T, rel=1e-12)
    # DPA -> TP: V_in(j) = (B - n_j)/B * K/h_kv
    v = tr.transfer_volumes(own["DPA"], own["TP"], cells)
    np.testing.assert_allclose(v["recv_B"], (B - n_j) / B * K / h, rtol=1e-12)
    assert tr.kv_transition(dep, "DPA", "TP", B, s).recv_B == pytest.approx((B - 1) / B * K / h, rel=1e-12)
    # sources spread over the g = 2 replicas of each head: TP -> DPA sends are balanced over replicas
    v = tr.transfer_volumes(own["TP"], own["DPA"], cells)
    assert v["send_B"].sum() == pytest.approx(v["recv_B"].sum(), rel=1e-12)


def test_gqa_weights_more_ranks_than_kv_heads():
    # T = 16 > h_kv = 8: q/o shards are 1/16 each; K/V projections replicated in pairs (1/8 each)
    dep = Deployment.build("llama-3-8b", "h100-sxm", 16)
    p = dep.model.attn_params_per_layer
    vol = (15 / 16 * (p["q"] + p["o"]) + 7 / 8 * (p["k"] + p["v"])) * 2 * 32
    t = tr.weight_transition(dep, "DOP", "DPA")
    assert t.primitive == AG and t.recv_B == pytest.approx(vol, rel=1e-12)


# ---- timing and the DeepSeek-V3 example --------------------------------------------------------------------

def test_allgather_time_matches_nccl_formula():
    # X -> TP in the MLA regime is an all-gather producing K/L bytes per layer on each of T ranks:
    # per layer alpha(T) + (T-1)/T * (K/L) / B_bus (docs/models.md §1.2)
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")
    B, s = 16, 4096
    K = K_bytes(dep, B, s)
    t = tr.kv_transition(dep, "CP", "TP", B, s)
    per_layer = alpha_s(8, dep.fabric.scale_up) + 7 / 8 * (K / 61) / 370e9
    assert t.time_s == pytest.approx(61 * per_layer, rel=1e-12)


def test_dsv3_dpa_to_tp_example():
    # docs/models.md §3.4: DSV3, T = 8, DPA -> TP with B*s = 64*8192 needs 32.24 GB per rank, 1.43 ms/layer at
    # 370 GB/s (NVLink4 NCCL busbw, nccl-tests#212)
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")
    t = tr.kv_transition(dep, "DPA", "TP", 64, 8192)
    assert t.primitive == AG
    assert t.recv_B == 7 / 8 * 64 * 8192 * 70_272
    assert t.recv_B / 1e9 == pytest.approx(32.24, abs=0.005)
    bw_ms = t.recv_B / 61 / 370e9 * 1e3
    assert bw_ms == pytest.approx(1.43, abs=0.005)
    assert t.time_s / 61 == pytest.approx(alpha_s(8, dep.fabric.scale_up) + bw_ms * 1e-3, rel=1e-12)
    # the weights move the other way (DPA -> TP discards), so the switch time is the KV time
    both = tr.transition(dep, "DPA", "TP", 64, 8192)
    assert both["weights"].primitive == DISC
    assert both["time_s"] == t.time_s


def test_handoff_overlap_formula():
    # docs/models.md §3.4: exposed = t_xfer,first + sum_{l >= 2} max(0, t_xfer,l - t_slack,l)
    dep = Deployment.build("deepseek-v3", "h200", 8, weight_dtype="fp8")
    h = tr.handoff_time(dep, "DPA", "TP", 64, 8192)
    L = 61
    assert h["serial_s"] == tr.transition(dep, "DPA", "TP", 64, 8192)["time_s"]
    assert h["per_layer_s"] == pytest.approx(h["serial_s"] / L, rel=1e-15)
    assert 0 < h["slack_per_layer_s"] < h["per_layer_s"]  # a sub-ms decode layer cannot hide 1.43 ms
    overlapped = h["per_layer_s"] + (L - 1) * (h["per_layer_s"] - h["slack_per_layer_s"])
    assert h["exposed_s"] == pytest.approx(overlapped, rel=1e-12)
    assert h["serial_s"] > h["exposed_s"] > 0.5 * h["serial_s"]
    none = tr.handoff_time(dep, "DPA", "DOP", 64, 8192)
    assert none == {"serial_s": 0.0, "exposed_s": 0.0, "per_layer_s": 0.0, "slack_per_layer_s": 0.0}


def test_weights_resident_removes_weight_time():
    dep = Deployment.build("llama-3-70b", "h100-sxm", 8)
    moving = tr.transition(dep, "TP", "CP", 8, 4096)
    resident = tr.transition(dep, "TP", "CP", 8, 4096, weights_resident=True)
    assert moving["weights"].time_s > 0
    assert resident["time_s"] == moving["kv"].time_s
    assert moving["time_s"] == pytest.approx(moving["kv"].time_s + moving["weights"].time_s, rel=1e-15)


def test_transition_matrix_rows():
    dep = Deployment.build("llama-3-70b", "h100-sxm", 8)
    rows = tr.transition_matrix(dep, 16, 4096)
    assert [(r["src"], r["dst"]) for r in rows] == PAIRS
    assert all(r["primitive"] == table_entry(GQA_KV_TABLE, r["src"], r["dst"]) for r in rows)
    wrows = tr.transition_matrix(dep, 16, 4096, what="weights")
    assert all(r["primitive"] == table_entry(WEIGHT_TABLE, r["src"], r["dst"]) for r in wrows)


def test_unknown_layout():
    with pytest.raises(SpecError, match="layout must be one of"):
        tr.ownership("EP", 2, 2, 2, False)
    dep = Deployment.build("llama-3-8b", "h100-sxm", 2)
    with pytest.raises(SpecError, match="got 'XX'"):
        tr.weight_transition(dep, "TP", "XX")


# ---- brute force on explicit ownership sets ----------------------------------------------------------------

def owner_sets(layout, T, B, heads, mla):
    """C(j) written from the layout definitions of docs/models.md §3.1, as Python sets of (seq, residue, head)."""
    cells = list(itertools.product(range(B), range(T), range(heads)))
    out = []
    for j in range(T):
        if layout == "TP":
            if mla:
                keep = set(cells)
            elif T <= heads:
                per = heads // T
                keep = {c for c in cells if j * per <= c[2] < (j + 1) * per}
            else:
                keep = {c for c in cells if c[2] == j // (T // heads)}
        elif layout == "CP":
            keep = {c for c in cells if c[1] == j}
        else:
            keep = {c for c in cells if c[0] % T == j}
        out.append(keep)
    return cells, out


def brute_force(cx, cy, cells, nbytes):
    """recv, send, freed per rank and the primitive from the set rule of docs/models.md §3.4."""
    T = len(cx)
    need = [cy[j] - cx[j] for j in range(T)]
    drop = [cx[j] - cy[j] for j in range(T)]
    recv = [sum(nbytes[c] for c in need[j]) for j in range(T)]
    freed = [sum(nbytes[c] for c in drop[j]) for j in range(T)]
    send = [0.0] * T
    for c in cells:
        receivers = sum(c in need[j] for j in range(T))
        holders = [j for j in range(T) if c in cx[j]]
        if receivers:
            assert holders, "a needed cell must be held by some rank"
            for j in holders:
                send[j] += receivers / len(holders) * nbytes[c]
    if not any(need):
        prim = NONE if not any(drop) else DISC
    elif all(cy[j] == set(cells) for j in range(T)):
        prim = AG
    else:
        prim = A2A
    # exact cover: after the moves every rank holds exactly C_Y(j)
    for j in range(T):
        assert (cx[j] | need[j]) - drop[j] == cy[j]
    return recv, send, freed, prim


CASES = [(T, B, heads, mla) for T in (1, 2, 3, 4) for B in (1, 2, 5) for heads in (1, 2, 4)
         for mla in (False, True) if not (mla and heads != 1) and (heads % T == 0 or T % heads == 0)]


@pytest.mark.parametrize("T, B, heads, mla", CASES)
def test_ownership_and_volumes_brute_force(T, B, heads, mla):
    rng = np.random.default_rng(T * 100 + B * 10 + heads)
    cells, _ = owner_sets("TP", T, B, heads, mla)
    nbytes = {c: float(rng.integers(1, 1000)) for c in cells}
    cell_arr = np.array([nbytes[c] for c in cells])
    for x, y in PAIRS:
        _, cx = owner_sets(x, T, B, heads, mla)
        _, cy = owner_sets(y, T, B, heads, mla)
        ox = tr.ownership(x, T, B, heads, mla).reshape(T, -1)
        oy = tr.ownership(y, T, B, heads, mla).reshape(T, -1)
        # the code's ownership equals the set definition (cells flattened in (seq, residue, head) order)
        for j in range(T):
            assert {c for c, o in zip(cells, ox[j]) if o} == cx[j]
        recv, send, freed, prim = brute_force(cx, cy, cells, nbytes)
        v = tr.transfer_volumes(ox, oy, cell_arr)
        np.testing.assert_allclose(v["recv_B"], recv, rtol=1e-12)
        np.testing.assert_allclose(v["send_B"], send, rtol=1e-12)
        np.testing.assert_allclose(v["freed_B"], freed, rtol=1e-12)
        assert v["primitive"] == prim, (x, y)
        assert v["send_B"].sum() == pytest.approx(v["recv_B"].sum(), rel=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_transfer_volumes_random_ownership(seed):
    rng = np.random.default_rng(seed)
    T, C = int(rng.integers(2, 6)), int(rng.integers(1, 12))
    ox = rng.random((T, C)) < 0.4
    ox[rng.integers(0, T, C), np.arange(C)] = True  # every cell has a holder before the switch
    oy = rng.random((T, C)) < 0.5
    nb = rng.integers(1, 100, C).astype(float)
    cells = list(range(C))
    cx = [set(np.flatnonzero(ox[j])) for j in range(T)]
    cy = [set(np.flatnonzero(oy[j])) for j in range(T)]
    recv, send, freed, prim = brute_force(cx, cy, cells, dict(enumerate(nb)))
    v = tr.transfer_volumes(ox, oy, nb)
    np.testing.assert_allclose(v["recv_B"], recv, rtol=1e-12)
    np.testing.assert_allclose(v["send_B"], send, rtol=1e-12)
    np.testing.assert_allclose(v["freed_B"], freed, rtol=1e-12)
    assert v["primitive"] == prim


def test_transfer_volumes_orphan_cell_rejected():
    ox = np.array([[True, False], [True, False]])
    oy = np.array([[True, True], [False, False]])
    with pytest.raises(SpecError, match="held by no rank"):
        tr.transfer_volumes(ox, oy, np.ones(2))

"""``llmexplore transfer``: JSON schema and values checked by hand, text output, bad input as one line."""

from __future__ import annotations

import json

import pytest

from llmexplore import cli
from llmexplore.transfer import TransferFragment, decode_transfer_fragments, encode_transfer_fragments


def _json(capsys, *argv) -> dict:
    capsys.readouterr()
    assert cli.main(["transfer", *argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


def test_llama70b_tp8_to_tp4_bytes_sources_and_fragments_by_hand(capsys):
    doc = _json(capsys, "--model", "llama-3-70b", "--prefill-tp", "8", "--decode-tp", "4")
    # Llama-3-70B: 80 layers, 8 KV heads of 128, BF16 -> K and V of one token = 80 * 2 * 8 * 128 * 2 B = 327,680 B
    assert doc["request_MB"] == pytest.approx(327_680 * 4096 / 1e6)
    # decode TP4 holds 2 heads per rank, prefill TP8 one: each decode rank gathers from 2 prefill ranks
    assert doc["max_sources"] == 2 and doc["max_fanout"] == 1 and doc["plan_kind"] == "fragmented"
    assert [p["target_prefill_ranks"] for p in doc["plans"]] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # the busiest NIC is a decode rank: a quarter of the request
    assert doc["busiest"].startswith("decode") and doc["busiest_MB"] == pytest.approx(doc["request_MB"] / 4)
    # one head's page = 16 tokens * 128 * 2 B = 4096 B; prefill rank 1's head lands after rank 0's
    frag = doc["plans"][0]["fragments"]
    assert [(f["src_rank"], f["buffer_kind"], f["dst_byte_offset"], f["bytes_per_page"]) for f in frag] == [
        (0, "target_k", 0, 4096), (0, "target_v", 0, 4096), (1, "target_k", 4096, 4096), (1, "target_v", 4096, 4096)]
    assert all(f["src_page_stride_bytes"] == 4096 and f["dst_page_stride_bytes"] == 8192 for f in frag)
    # the JSON fragments are version-1 wire objects: they round-trip through the wire codec
    frags = tuple(TransferFragment(**f) for f in frag)
    assert decode_transfer_fragments(*encode_transfer_fragments(frags)) == frags
    assert doc["roundtrip_ok"] is True
    # serial time = latency + writes + busiest bytes / achievable bandwidth, with the parts reported
    assert doc["serial_ms"] == pytest.approx(doc["latency_ms"] + doc["ops_ms"] + doc["bandwidth_ms"])
    assert 0 < doc["pipelined_ms"] < doc["serial_ms"]
    assert doc["fanout"] == {str(p): 1 for p in range(8)}


def test_identity_and_replicated_mla(capsys):
    doc = _json(capsys, "--model", "llama-3-70b", "--prefill-tp", "8", "--decode-tp", "8")
    assert doc["plan_kind"] == "identity" and all(p["fragments"] == [] for p in doc["plans"])
    assert [p["target_prefill_ranks"] for p in doc["plans"]] == [[r] for r in range(8)]
    # DeepSeek-V3 MLA: the latent is replicated; decode TP1 takes it from prefill rank (0 * 8) // 1 = 0 only
    doc = _json(capsys, "--model", "deepseek-v3", "--prefill-tp", "8", "--decode-tp", "1", "--page-size", "64")
    assert doc["idle_prefill_ranks"] == 7 and doc["plans"][0]["target_prefill_ranks"] == [0]
    # 61 layers x (512 + 64) x 2 B per token, whole pages of 64
    assert doc["request_MB"] == pytest.approx(61 * 576 * 2 * 4096 / 1e6)


def test_decode_replicas_are_reported_as_local_copies(capsys):
    # Llama-3-70B decode TP16: each head on 2 ranks; version 1 sends only to the first of each pair
    doc = _json(capsys, "--model", "llama-3-70b", "--prefill-tp", "8", "--decode-tp", "16")
    odd = [r for r in doc["decode_ranks"] if r["decode_rank"] % 2]
    assert all(r["received_MB"] == 0 and r["local_copy_MB"] > 0 for r in odd)
    assert doc["local_copy_MB"] == pytest.approx(doc["request_MB"])


def test_dp_pairing_any_routes_from_a_chosen_group(capsys):
    doc = _json(capsys, "--model", "llama-3-8b", "--prefill-tp", "2", "--prefill-dp", "2", "--decode-tp", "1",
                "--decode-dp", "4", "--dp-pairing", "any", "--decode-dp-group", "3", "--prefill-dp-group", "1")
    [plan] = doc["plans"]
    assert plan["decode_rank"] == 3 and plan["target_dp_group"] == 1 and plan["target_prefill_ranks"] == [2, 3]


def test_text_output_states_the_headline(capsys):
    assert cli.main(["transfer", "--model", "llama-3-70b", "--prefill-tp", "8", "--decode-tp", "4",
                     "--fragments"]) == 0
    out = capsys.readouterr().out
    assert "1,342.2 MB per request" in out and "round-trip check: ok" in out
    assert "decode rank" in out and "prefill rank" in out and "target_v" in out


@pytest.mark.parametrize("argv, needles", [
    (["--model", "llama-3-70b", "--prefill-tp", "3", "--decode-tp", "4"], ["--prefill-tp", "KV heads", "3"]),
    (["--model", "llama-3-70b", "--prefill-tp", "8", "--decode-tp", "4", "--decode-dp", "2"],
     ["--decode-dp", "--prefill-dp", "any"]),
    (["--model", "llama-3-70b", "--prefill-tp", "8", "--decode-tp", "4", "--decode-dp-group", "1"],
     ["--decode-dp-group", "1"]),
    (["--model", "llama-3-70b", "--prefill-tp", "1024", "--prefill-dp", "1024", "--decode-tp", "4"],
     ["--prefill-tp", "--prefill-dp", "65,536"]),
    (["--model", "nope", "--prefill-tp", "8", "--decode-tp", "4"], ["nope"]),
    (["--model", "llama-3-70b", "--prefill-tp", "0", "--decode-tp", "4"], ["--prefill-tp", "0"]),
])
def test_bad_input_is_one_line_naming_the_flag(capsys, argv, needles):
    capsys.readouterr()
    assert cli.main(["transfer", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("llmexplore: error: ")
    for needle in needles:
        assert needle in err, (needle, err)


def test_transfer_with_pipeline_stages_and_speculative_decoding(capsys):
    """--prefill-pp / --decode-pp / --speculative (issue 21): the JSON lists the stage pairs that talk and, per
    decode rank, the version-1 fragments of each prefill stage it meets with their layers; a bad combination is
    one line naming the flag."""
    base = ["transfer", "--model", "llama-3-70b", "--prefill-tp", "8", "--decode-tp", "4"]
    doc = _json(capsys, *base[1:], "--prefill-pp", "2", "--decode-pp", "3")
    assert (doc["prefill_pp"], doc["decode_pp"], doc["stage_pairs"], doc["layouts"]) == (2, 3, 4, "TP8xPP2 → TP4xPP3")
    assert [(p["prefill_stage"], p["decode_stage"], p["first_layer"], p["last_layer"]) for p in doc["stages"]] == [
        (0, 0, 0, 26), (0, 1, 27, 39), (1, 1, 40, 53), (1, 2, 54, 79)]
    assert len(doc["plans"]) == 12 and len(doc["fanout"]) == 16
    plan = next(p for p in doc["plans"] if p["decode_rank"] == 4)
    assert plan["target_prefill_ranks"] == [0, 1, 8, 9]
    assert [(s["prefill_stage"], s["layers"]) for s in plan["stages"]] == [(0, [27, 40]), (1, [40, 54])]
    assert doc["request_MB"] == pytest.approx(1342.17728) and doc["roundtrip_ok"] is True
    spec = _json(capsys, "--model", "deepseek-v3", "--prefill-tp", "8", "--decode-tp", "4",
                 "--speculative", "deepseek-mtp-1")
    assert spec["speculative"] == "deepseek-mtp-1" and spec["draft_MB"] == pytest.approx(4 * 4096 * 1152 / 1e6)
    assert [b["layer_range"] for b in spec["buffers"]] == [[0, 61], [61, 62]]
    for extra, msg in ((["--decode-pp", "2", "--speculative", "ngram-5"],
                        "--decode-pp (2) must be 1 when decoding speculatively with 'ngram-5'"),
                       (["--prefill-pp", "81"], "--prefill-pp (81) must be at most the layers of llama-3-70b (80)"),
                       (["--speculative", "deepseek-mtp-1"], "--speculative 'deepseek-mtp-1' drafts with an MTP "
                                                             "module, and llama-3-70b has none")):
        capsys.readouterr()
        code = cli.main([*base, *extra])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and msg in err, err

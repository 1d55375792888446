"""Workload of a serving question (llmexplore.models.serving.workload): length distributions, traffic, requests, traces."""

import numpy as np
import pytest

from llmexplore.errors import SpecError
from llmexplore.models.queueing import mg1
from llmexplore.models.serving.workload import LengthDist, Trace, Traffic, requests
from llmexplore.traces import length_dist_from_csv, load_trace


def test_fixed_and_empirical_sample_and_mean():
    d = LengthDist.fixed(512)
    assert d.sample(4, 0).tolist() == [512] * 4 and d.mean() == 512.0 and d.sample(3, 0).dtype == np.int64
    e = LengthDist.empirical([10, 20, 60])
    s = e.sample(30_000, np.random.default_rng(1))
    assert set(np.unique(s)) == {10, 20, 60}
    assert e.mean() == 30.0 and abs(s.mean() - 30.0) < 0.5
    assert e.max == 60 and d.max == 512


def test_lognormal_mean_is_the_exact_mean_of_its_sampler():
    d = LengthDist.lognormal(1000, 1.0, 32768)
    k, p = mg1.lognormal_prompt_pmf(median_tokens=1000, sigma=1.0, max_tokens=32768)
    assert d.mean() == pytest.approx(float(k @ p), rel=1e-12)
    s = d.sample(400_000, 7)
    assert s.min() >= 1 and s.max() <= 32768
    assert s.mean() == pytest.approx(d.mean(), rel=0.01)  # standard error ~0.3 %
    assert LengthDist.lognormal(300, 0.0).sample(5, 0).tolist() == [300] * 5


def test_sampling_is_deterministic_for_a_seed():
    d = LengthDist.lognormal(800, 0.7)
    assert np.array_equal(d.sample(100, 3), d.sample(100, 3))
    assert not np.array_equal(d.sample(100, 3), d.sample(100, 4))


@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="fixed"), "value must be given"),
    (dict(kind="fixed", value=0), r"value must be an integer in \[1, 4,194,304\] \[tokens\], got 0"),
    (dict(kind="fixed", value=2.5), "value must be an integer"),
    (dict(kind="lognormal"), "median must be given"),
    (dict(kind="lognormal", median=100, sigma=-1), "sigma must be a finite number in"),
    (dict(kind="lognormal", median=5000, max_tokens=1000), r"median must be a finite number in \[1, 1000\]"),
    (dict(kind="empirical", values=()), "values must not be empty"),
    (dict(kind="empirical", values=(3, 0)), "values must be an integer"),
    (dict(kind="uniform"), "kind must be one of"),
])
def test_length_dist_rejects_bad_input(kwargs, match):
    with pytest.raises(SpecError, match=match):
        LengthDist(**kwargs)


def test_length_from_csv(tmp_path):
    f = tmp_path / "lens.csv"
    f.write_text("a,isl\n1,100\n2,300\n\n3,200\n")
    assert length_dist_from_csv(f, "isl").mean() == 200.0
    with pytest.raises(SpecError, match=r"column 'osl' not found; the header has \['a', 'isl'\]"):
        length_dist_from_csv(f, "osl")
    f.write_text("isl\n100\nabc\n")
    with pytest.raises(SpecError, match=r"line 3: isl must be an integer in \[1, 4,194,304\], got 'abc'"):
        length_dist_from_csv(f, "isl")


def test_traffic_validation():
    with pytest.raises(SpecError, match="exactly one of rate_per_s, concurrency and trace must be given, got none"):
        Traffic()
    with pytest.raises(SpecError, match=r"got \['rate_per_s', 'concurrency'\]"):
        Traffic(rate_per_s=1.0, concurrency=4)
    with pytest.raises(SpecError, match=r"rate_per_s must be a finite number in \[1e-6, 1e9\] \[1/s\], got -1"):
        Traffic(rate_per_s=-1)
    with pytest.raises(SpecError, match=r"prefix_ratio must be a finite number in \[0, 1\)"):
        Traffic(rate_per_s=1, prefix_ratio=1.0)
    with pytest.raises(SpecError, match="isl must be a LengthDist, got int"):
        Traffic(rate_per_s=1, isl=100)
    with pytest.raises(SpecError, match="concurrency must be an integer"):
        Traffic(concurrency=0)


def test_requests_poisson_lengths_and_prefix():
    tr = Traffic(rate_per_s=5.0, isl=LengthDist.lognormal(1000, 0.5), osl=LengthDist.fixed(64), prefix_ratio=0.25)
    r = requests(tr, 50_000, seed=11)
    assert set(r) == {"arrival_s", "prompt_tokens", "output_tokens", "prefix_tokens"}
    assert all(v.shape == (50_000,) for v in r.values())
    gaps = np.diff(r["arrival_s"])
    assert (gaps >= 0).all() and gaps.mean() == pytest.approx(0.2, rel=0.02)
    assert np.array_equal(r["prefix_tokens"], np.minimum(r["prompt_tokens"] // 4, r["prompt_tokens"] - 1))
    assert (r["prefix_tokens"] < r["prompt_tokens"]).all() and (r["output_tokens"] == 64).all()
    again = requests(tr, 50_000, seed=11)
    assert all(np.array_equal(again[k], r[k]) for k in r)
    # arrivals scale with the rate under the same seed (common random numbers: monotonicity tests rely on it)
    fast = requests(Traffic(rate_per_s=10.0, isl=tr.isl, osl=tr.osl), 100, seed=11)
    assert np.allclose(fast["arrival_s"] * 2.0, r["arrival_s"][:100])
    closed = requests(Traffic(concurrency=8), 10, seed=0)
    assert (closed["arrival_s"] == 0).all() and (closed["prompt_tokens"] == 1024).all()
    with pytest.raises(SpecError, match="seed must be an integer >= 0"):
        requests(tr, 10, seed="x")
    with pytest.raises(SpecError, match="n must be given"):
        requests(tr)


def test_load_trace_and_prefix_ids(tmp_path):
    f = tmp_path / "trace.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens,prefix_id\n0.0,100,10,sys\n0.5,200,20,\n"
                 "0.5,300,30,sys\n1.25,400,40,other\n")
    tr = load_trace(f, prefix_ratio=0.5)
    assert tr.trace is not None and len(tr.trace) == 4
    r = requests(tr)
    assert r["arrival_s"].tolist() == [0.0, 0.5, 0.5, 1.25]
    assert r["output_tokens"].tolist() == [10, 20, 30, 40]
    # the first request of a prefix computes it; the second of 'sys' hits; no id, no hit
    assert r["prefix_tokens"].tolist() == [0, 0, 150, 0]
    assert requests(tr, 2)["prompt_tokens"].tolist() == [100, 200]


@pytest.mark.parametrize("text, match", [
    ("arrival_s,prompt_tokens\n0,1\n", r"missing column\(s\) \['output_tokens'\]"),
    ("arrival_s,prompt_tokens,output_tokens\n", "no requests"),
    ("arrival_s,prompt_tokens,output_tokens\n1,10,5\n0.5,10,5\n",
     "line 3: arrival_s must be non-decreasing, got 0.5 after 1"),
    ("arrival_s,prompt_tokens,output_tokens\n0,10,-5\n", r"line 2: output_tokens must be an integer in \[1, "),
    ("arrival_s,prompt_tokens,output_tokens\nnan,10,5\n", r"line 2: arrival_s must be a finite number >= 0 \[s\]"),
    ("arrival_s,prompt_tokens,output_tokens\n0,10\n", "line 2: 2 cells, the header has 3"),
    ("", "the file is empty"),
])
def test_load_trace_errors_name_line_and_rule(tmp_path, text, match):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(SpecError, match=match):
        load_trace(f)


def test_trace_object_validation():
    with pytest.raises(SpecError, match="must have one equal, non-zero length"):
        Trace(np.array([0.0, 1.0]), np.array([5]), np.array([5, 6]))
    with pytest.raises(SpecError, match="arrival_s must be non-decreasing, got 2 then 1 at request 1"):
        Trace(np.array([2.0, 1.0]), np.array([5, 5]), np.array([5, 6]))
    t = Trace(np.array([0.0]), np.array([5]), np.array([6]))
    with pytest.raises(ValueError):
        t.arrival_s[0] = 3.0  # stored read-only


def test_a_trace_cell_beyond_the_csv_limit_is_one_error(tmp_path):
    """Issue 20 §2: a cell over csv's 131,072-character field limit raised _csv.Error."""
    from llmexplore.traces import load_trace

    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0," + "1" * 200_000 + ",5\n")
    with pytest.raises(SpecError, match=r"t.csv: not a CSV table this can read \(field larger than field limit"):
        load_trace(path)

"""Fuzz of the command line and of preset files (hypothesis).

Every command gets hostile values on its flags (negatives, zero, huge and 400-digit integers, 1e300, nan, inf,
-inf, words, empty text, unicode, values just past each stated bound), flags given twice, left out, or unknown;
preset files get hostile content (not a mapping, wrong types, huge numbers, a BOM, non-UTF-8 bytes, duplicate
and unknown keys). The only allowed outcomes are

* a clean result: exit 0, nothing on stderr, and (with ``--json``) strictly valid JSON on stdout; or
* bad input: exit 2, nothing on stdout, exactly one stderr line ``llmexplore: error: ...`` naming the flag (or
  the preset file and field), the value and the rule.

Anything else (a traceback, a hang, a second line, a silently accepted bad value) fails. Commands run
in-process (``cli.main``); examples are capped so the whole file stays fast; no timing is asserted.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmexplore import cli, presets, report
from llmexplore.cli import _framework
from llmexplore.cli._framework import Checked

pytestmark = pytest.mark.slow  # a fuzz of every command: the fast tier (-m 'not slow') leaves it out

DATA = Path(__file__).resolve().parents[2] / "data" / "calibration" / "aic-llama31-70b-tp8-h100.csv"

#: a valid command line for each command (small and fast); the fuzz mutates it
BASE = {
    "layouts": ["layouts", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--ranks", "2", "--batch", "8",
                "--context", "1024"],
    "pd": ["pd", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--prompt", "512", "--output", "32",
           "--prefill-tp", "1", "--decode-tp", "1"],
    "prefill": ["prefill", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--ranks", "2", "--prompt", "1024"],
    "moe": ["moe", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--gpus", "8", "--batch-tokens", "64"],
    "transfer": ["transfer", "--model", "llama-3-8b", "--prefill-tp", "2", "--decode-tp", "1"],
    "offload": ["offload", "--model", "llama-3.2-3b", "--gpu", "h100-sxm", "--storage", "nvme-gen4", "--prefix",
                "4096"],
    "calibrate": ["calibrate", "--data", str(DATA)],
    "calibrate-disk": ["calibrate-disk", ".", "--size-mb", "1", "--block-sizes", "4", "--queue-depths", "1"],
    "presets": ["presets", "models"],
    "validate": ["validate"],
    "report": ["report", "--out", "reports-fuzz"],
    "plan": ["plan", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "2", "--isl", "512", "--osl", "32",
             "--ttft-ms", "500", "--tpot-ms", "30", "--weight-dtype", "fp8", "--kv-dtype", "fp8"],
    "simulate": ["simulate", "--config", '{"model": "llama-3-8b", "gpu": "h100-sxm", "mode": "colocated", '
                 '"weight_dtype": "fp8", "kv_dtype": "fp8", "sides": [{"role": "colocated", "instances": 1, '
                 '"ranks": 1, "layout": "TP", "max_num_seqs": 8, "chunk_tokens": 512}]}', "--isl", "256",
                 "--osl", "16", "--rate", "2", "--requests", "40"],
}

#: values of a prompt-length spread cost seconds per run (an exact M/G/1 tail): the fuzz gives --prompt-sigma
#: only values the rule rejects, or 0 (valid spreads are run by tests/unit/models/serving/test_disagg.py)
EXPENSIVE = {("pd", "--prompt-sigma")}
#: calibrate-disk writes --size-mb MB for real: the fuzz gives it only values the rule rejects (and the
#: small_disk_runs fixture makes the default small, for when the flag is dropped)
EXPENSIVE |= {("calibrate-disk", "--size-mb")}
#: plan: worker pools, a cluster address and simulator re-checks cost seconds each (tests/unit/sweeps/test_plan.py runs
#: them); simulate: request counts up to a million
EXPENSIVE |= {("plan", "--workers"), ("plan", "--scheduler"), ("plan", "--simulate"), ("simulate", "--requests"),
              ("plan", "--gpus")}

HOSTILE = ["-1", "0", "-0", "1e300", "-1e300", "1e-320", "nan", "NaN", "inf", "-inf", "Infinity", "9" * 400,
           "-" + "9" * 30, "1.5", "2.0", "+3", "1e3", "0x10", "1_000", "\u0663", "\uff18", "abc", "", " ", "\t",
           "ünï", "\U0001f642", "8 8", "--", "-", "-x", "--json", "None", "true", "[1, 2]", "{}", "'8'", "\x00",
           "a\nb", "é" * 300]


def _parser_actions(command: str) -> dict[str, object]:
    """flag -> argparse action of one command (the options its parser declares)."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    p = sub.choices[command]
    return {a.option_strings[-1]: a for a in p._actions if a.option_strings and a.option_strings[-1] != "--help"}


def _boundary_values(action) -> list[str]:
    """Text just inside and just past a numeric rule's bounds."""
    check = getattr(action, "check", None)
    if check is None or check.bounds is None:
        return []
    lo, hi = check.bounds
    out = []
    for b in (lo, hi):
        if b is None:
            continue
        if isinstance(b, int):
            out += [str(b - 1), str(b), str(b + 1)]
        else:
            out += [repr(b), repr(math.nextafter(b, -math.inf)), repr(math.nextafter(b, math.inf))]
    return out


#: plausible values (most pass the flag's own rule and reach the model: ranks that do not divide the heads,
#: dtypes, presets, combinations of flags)
PLAUSIBLE = st.one_of(st.integers(0, 130).map(str), st.sampled_from([2**k for k in range(13)]).map(str),
                      st.sampled_from(["0.5", "1.0", "2.6", "0.25", "3", "8", "fp8", "fp4", "bf16", "fp16", "fp32",
                                       "default", "uncalibrated", "h200", "b200", "mi300x", "deepseek-v3",
                                       "llama-3-70b", "qwen3-30b-a3b", "nvlink4", "tcp-100g", "roce-400g"]))


PRESET_FLAGS = {"--model": "models", "--gpu": "hardware", "--runtime": "runtime", "--start": "runtime",
                "--link": "links", "--scale-up-link": "links", "--scale-out-link": "links"}


def _fitting_values(flag: str, action) -> st.SearchStrategy[str]:
    """Values that pass the flag's own rule: the choices, preset names, numbers inside the bounds."""
    check = action.check
    if flag in PRESET_FLAGS:
        return st.sampled_from(presets.names(PRESET_FLAGS[flag]))
    if check.rule.startswith("one of "):
        return st.sampled_from(check.rule[len("one of "):].split(", "))
    if check.bounds is not None:
        lo, hi = check.bounds
        lo = 0 if lo is None else lo
        if check.rule.startswith("an integer"):
            top = min(hi if hi is not None else 4096, 4096)
            return st.one_of(st.integers(lo, min(top, lo + 64)), st.sampled_from([2**k for k in range(13)
                                                                                 if lo <= 2**k <= top])).map(str)
        top = min(hi if hi is not None else 1e4, 1e4)
        return st.floats(lo, top, allow_nan=False).map(repr)
    return PLAUSIBLE


def _values_for(command: str, flag: str, action) -> st.SearchStrategy[str]:
    boundary = _boundary_values(action)
    hostile = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=12), st.integers(-10**6, 10**6).map(str),
                        st.floats(allow_nan=True, allow_infinity=True).map(repr))
    fitting = _fitting_values(flag, action)
    values = st.one_of(fitting, fitting, PLAUSIBLE, hostile, hostile,
                       *([st.sampled_from(boundary)] if boundary else []))
    if (command, flag) in EXPENSIVE:
        values = values.filter(lambda v: not _cheap_valid(action, v))
    return values


def _cheap_valid(action, text: str) -> bool:
    """True if ``text`` passes the option's rule (and would run the full model)."""
    try:
        return action.check.convert(text) != 0
    except (ValueError, TypeError, OverflowError):
        return False


@st.composite
def command_lines(draw, command: str):
    """A command line of ``command`` with one to three hostile changes; returns (argv, changes), each change
    (kind, flag, value)."""
    argv = list(BASE[command])
    actions = _parser_actions(command)
    value_flags = [f for f, a in actions.items() if a.nargs is None and isinstance(a, Checked)]
    if command == "report":  # -p values are the notebook-parameter rules' business (their own tests)
        value_flags = [f for f in value_flags if f != "--parameter"]
    changes = []
    if command == "presets":  # its one argument is positional
        kind = draw(st.one_of(st.sampled_from(["models", "hardware", "links", "runtime"]), PLAUSIBLE,
                              st.sampled_from(HOSTILE)))
        argv[1] = kind
        changes.append(("value", "kind", kind))  # argparse names the positional argument "kind"
    for _ in range(draw(st.integers(0 if command == "presets" else 1, 3))):
        kind = draw(st.sampled_from(["value"] * 12 + ["twice", "drop", "unknown", "missing-value"]))
        value_flags = [f for f in value_flags if f not in {c[1] for c in changes}]  # each flag changed once
        if not value_flags:
            break
        if kind == "value":
            flag = draw(st.sampled_from(value_flags))
            value = draw(_values_for(command, flag, actions[flag]))
            if flag in argv:
                argv[argv.index(flag) + 1] = value
            else:
                argv += [flag, value]
            changes.append(("value", flag, value))
        elif kind == "twice":
            present = [f for f in value_flags if f in argv]
            if present:
                flag = draw(st.sampled_from(present))
                value = draw(st.sampled_from(HOSTILE[:8]))
                argv += [flag, value]
                changes.append(("twice", flag, value))
        elif kind == "drop":
            present = [f for f in value_flags if f in argv]
            if present:
                flag = draw(st.sampled_from(present))
                i = argv.index(flag)
                del argv[i:i + 2]
                changes.append(("drop", flag, ""))
        elif kind == "unknown":
            flag = draw(st.sampled_from(["--tp", "--frobnicate", "-z", "--batchsize"]))
            argv += [flag, "3"]
            changes.append(("unknown", flag, "3"))
        else:
            flag = draw(st.sampled_from(value_flags))
            if flag not in argv:
                argv += [flag]
                changes.append(("missing-value", flag, ""))
    if command != "report" and draw(st.booleans()):
        argv.append("--json")
    return argv, changes


RULE_WORDS = ("must", "no ", "expected", "required", "given twice", "unrecognized", "ambiguous", "invalid choice",
              "not valid", "does not exist")


def _value_forms(value: str) -> list[str]:
    forms = {value, value.strip(), _framework.shown(value), repr(value)}
    try:
        f = float(value)
        forms |= {repr(f), f"{f:g}"}
        if math.isfinite(f) and f == int(f):
            forms.add(str(int(f)))
    except (ValueError, OverflowError):
        pass
    forms |= {x[:20] for x in list(forms) if len(x) > 20}  # long values are shortened in the middle
    return [x for x in forms if x]


def _check_outcome(code: int, out: str, err: str, argv: list[str], changes: list[tuple]) -> None:
    if code == 0:
        assert err == "", (argv, err)
        if "--json" in argv:
            json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}: {argv}"))
        return
    assert code == 2, (argv, code, err)
    assert out == "", (argv, out)
    assert err.startswith("llmexplore: error: ") and err.endswith("\n") and err.count("\n") == 1, (argv, err)
    assert "Traceback" not in err
    msg = err[len("llmexplore: error: "):]
    assert any(w in msg for w in RULE_WORDS), (argv, msg)  # the rule
    if msg.startswith("unrecognized arguments: "):  # argparse names the stray arguments themselves
        assert all(tok in argv for tok in msg[len("unrecognized arguments: "):].strip().split(" ")), (argv, msg)
        return
    def said(word: str) -> bool:  # "--gpu" is not said by "--gpus must ..."
        return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", msg) is not None

    flags = [tok for tok in argv[1:] if tok.startswith("-") and said(tok) and tok in _parser_actions(argv[0])]
    named = [c for c in changes if said(c[1])] or flags
    assert named, (argv, msg)  # the flag
    if "expected one argument" in msg or "required" in msg:
        return  # a missing value or flag: there is no value to name
    values = [c[2] for c in changes if said(c[1]) and c[0] in ("value", "twice", "unknown")]
    values += [argv[i + 1] for i, tok in enumerate(argv[:-1]) if tok in flags]  # the value each named flag got
    assert any(form in msg for v in values for form in _value_forms(v)), (argv, msg)  # the value


SIM_CFG = json.dumps({"model": "llama-3-8b", "gpu": "h100-sxm", "mode": "colocated", "weight_dtype": "bf16",
                      "kv_dtype": "bf16", "sides": [{"role": "colocated", "instances": 1, "ranks": 1, "layout": "TP",
                                                     "max_num_seqs": 8, "chunk_tokens": 2048}]})

#: command lines the fuzz once failed on, and what each must give now (exit status, text on stdout or stderr)
REGRESSIONS = [
    # without --ep, an error of the pure-TP comparison (TP64 cannot split 32 query heads) named no flag; the
    # layout asked for (DPA+EP64) is valid, so it now runs and says why there is no comparison
    (["moe", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--gpus", "64", "--batch-tokens", "64"], 0,
     "no pure TP64 comparison: ranks (64) must divide the query heads of qwen3-30b-a3b (32)"),
    (["moe", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--gpus", "64", "--ep", "8", "--batch-tokens", "64"],
     0, "no pure TP64 comparison"),
    # a flag name put into a message was replaced again ("tp (= --gpus / --ep) (= --gpus / --ep) (32)")
    (["moe", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--gpus", "64", "--ep", "2", "--batch-tokens", "64"],
     2, "tp (= --gpus / --ep) (32) must divide the GPUs per node (8) when --ep > 1"),
    # --block-tokens 7 passed its rule [1, 65536], then the break-even search failed with "max_tokens /
    # --block-tokens must be at most 65,536 blocks, got 299,593" (not the value typed): the rule is now the
    # search's own bound
    (["offload", "--model", "llama-3.2-3b", "--gpu", "h100-sxm", "--storage", "nvme-gen4", "--prefix", "4096",
      "--block-tokens", "7"], 2, "--block-tokens must be an integer in [32, 65,536], got 7"),
    (["offload", "--model", "llama-3.2-3b", "--gpu", "h100-sxm", "--storage", "nvme-gen4", "--prefix", "4096",
      "--block-tokens", "32"], 0, "32-token blocks"),
    # issue 20 §2: report --out '' wrote into the current directory, two --out were accepted, and a parent the OS
    # refuses was a FileNotFoundError
    (["report", "--out", ""], 2, "--out must be a directory (existing or to create) whose names are at most 255 "
                                 "bytes each, not a file, got ''"),
    # issue 20 §2: an --out of 5,000 characters was "not a file"; --notebook '' and a text file were tracebacks;
    # --timeout 1e-320 passed (> 0) and papermill refused a float
    (["report", "--out", "a" * 5000], 2, "whose names are at most 255 bytes each"),
    (["report", "--notebook", ""], 2, "--notebook must name a notebook (00_index, "),
    (["report", "--notebook", str(Path(__file__))], 2, "--notebook must be a Jupyter notebook (nbformat 4 JSON)"),
    (["report", "--timeout", "1e-320"], 2, "--timeout must be an integer in [1, 86,400] [s], got 1e-320"),
    # issue 20 §2: 1 TiB passed --size-mb (and calibrate-disk wrote until the disk was full)
    (["calibrate-disk", ".", "--size-mb", "1048576"], 2, "--size-mb must be an integer in [1, 65,536] [MB]"),
    (["report", "--out", "a", "--out", "b"], 2, "--out given twice (a and b); give it once"),
    (["report", "--out", "/proc/no/such"], 2, "--out must be a directory that can be created and written, got "
                                              "/proc/no/such"),
    # issue 20 §2: port 99999 passed the address rule
    (["plan", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--isl", "1000", "--osl", "300",
      "--ttft-ms", "500", "--tpot-ms", "30", "--scheduler", "tcp://127.0.0.1:99999"], 2,
     "--scheduler must be a Dask scheduler address such as tcp://host:8786 (port 1-65,535), got "
     "tcp://127.0.0.1:99999"),
    # issue 20 §2: "-0" was kept as a negative zero and printed "(-0 us)"
    (["offload", "--model", "llama-3.2-3b", "--gpu", "h100-sxm", "--storage", "nvme-gen4", "--prefix", "4096",
      "--latency-us", "-0"], 0, "PCIe Gen4 x4 (0 us)"),
    # issue 20 §2: pathlib's RuntimeError for a ~user with no home directory was a traceback
    (["validate", "--data", "~nouser/x.csv"], 2,
     "--data must be a path whose ~ can be expanded, got '~nouser/x.csv' (no such user or home directory)"),
    (["calibrate", "--data", "~nouser/x.csv"], 2, "--data must be a path whose ~ can be expanded"),
    # issue 20 §2: a rate of 1e-320 req/s passed (> 0) and printed TTFT nan: arrivals overflow to infinity
    (["simulate", "--config", SIM_CFG, "--isl", "100", "--osl", "10", "--requests", "5", "--rate", "1e-320"], 2,
     "--rate must be a finite number in [1e-6, 1e9], got 1e-320"),
    # ... and one-token outputs printed TPOT nan: they have no gap between tokens, and the table says so
    (["simulate", "--config", SIM_CFG, "--isl", "100", "--requests", "5", "--rate", "1", "--osl", "1"], 0,
     "TPOT and ITL: not defined, every output is a single token"),
]


@pytest.mark.parametrize("argv, code, text", REGRESSIONS)
def test_cli_regressions(argv, code, text, capsys, monkeypatch):
    monkeypatch.delenv("LLMEXPLORE_PRESETS", raising=False)
    presets.clear_cache()
    got = cli.main(argv)
    out, err = capsys.readouterr()
    assert got == code, (out, err)
    assert text in (out if code == 0 else err), (out, err)
    _check_outcome(got, out, err, argv, [("value", argv[-2], argv[-1])])  # the fuzz's contract
    assert "(= --gpus / --ep) (= --gpus / --ep)" not in err


def test_offload_break_even_names_block_tokens_its_value_and_rule():
    # the API behind the CLI: the message names block_tokens (the flag --block-tokens), the value and the rule
    from llmexplore.errors import SpecError
    from llmexplore.models.offload import cost as of
    from llmexplore.sweeps import offload as so

    s = so.setup("llama-3.2-3b", "h100-sxm", storage="nvme-gen4", block_tokens=7)
    with pytest.raises(SpecError, match=r"^block_tokens must be at least 32 \[tokens\] for a break-even search up "
                                        r"to 2,097,152 tokens \(at most 65,536 blocks\), got 7$"):
        of.break_even(s.dep, s.tier, block_tokens=7)
    assert of.MIN_SEARCH_BLOCK_TOKENS == 32
    assert of.break_even(s.dep, s.tier, block_tokens=7, max_tokens=7 * 65536)["block_tokens"] == 7


@pytest.mark.parametrize("text, rule", [
    ("[" * 50_000 + "]" * 50_000, "nests its JSON arrays or objects too deeply to read"),
    ('{"model": ' + "9" * 5000 + "}", "holds a number too long to read"),
])
def test_a_config_python_cannot_parse_is_one_line(text, rule, tmp_path, capsys):
    """Issue 20 §2: JSON nested 50,000 deep (RecursionError) and a 5,000-digit integer (ValueError) were
    tracebacks; both are now one line naming --config, from a file or as text."""
    path = tmp_path / "cfg.json"
    path.write_text(text)
    for config in (str(path), text):
        assert cli.main(["simulate", "--config", config, "--isl", "10", "--osl", "10", "--rate", "1"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("llmexplore: error: --config ") and rule in err and err.count("\n") == 1


def test_flag_message_replaces_each_name_once():
    flags = {"ranks": "tp (= --gpus / --ep)", "tp": "tp (= --gpus / --ep)", "ep": "--ep"}
    assert (_framework.flag_message("ranks (8) must divide the query heads; tp (2), ep (4)", flags)
            == "tp (= --gpus / --ep) (8) must divide the query heads; tp (= --gpus / --ep) (2), --ep (4)")


@pytest.fixture
def no_reports(monkeypatch):
    """``report`` must never execute notebooks here: its inputs are checked, then a fake build returns."""
    monkeypatch.setattr(report, "build_reports", lambda **kw: [Path(kw["out_dir"]) / "index.html"])


@pytest.fixture
def small_disk_runs(monkeypatch):
    """``calibrate-disk`` without --size-mb writes a 2 MB test file here, not the default 256 MB."""
    from llmexplore.storage import calibrate as cal

    monkeypatch.setattr(cal, "DEFAULT_SIZE_MB", 2)
    monkeypatch.setattr(cal, "DEFAULT_POINT_S", 0.05)


FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])

#: examples per command: the cheap commands get more
EXAMPLES = {"layouts": 120, "prefill": 60, "moe": 60, "pd": 40, "transfer": 60, "offload": 50, "calibrate": 25,
            "calibrate-disk": 20, "presets": 15, "report": 25, "validate": 10, "plan": 30, "simulate": 30}


@pytest.mark.parametrize("command", list(EXAMPLES))
def test_cli_fuzz(command, capsys, no_reports, small_disk_runs, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # report --out, calibrate --save and calibrate-disk stay in the test's directory
    monkeypatch.delenv("LLMEXPLORE_PRESETS", raising=False)
    presets.clear_cache()

    @settings(FUZZ, max_examples=EXAMPLES[command])
    @given(case=command_lines(command))
    def run(case):
        argv, changes = case
        capsys.readouterr()
        code = cli.main(argv)
        out, err = capsys.readouterr()
        _check_outcome(code, out, err, argv, changes)

    run()


# ---- preset files -------------------------------------------------------------------------------------------
ENTRIES = {
    "hardware": ("fuzz-gpu", {"hbm_GiB": "80", "hbm_bw_TBps": "3.35", "bf16_TFLOPS": "989.4", "fp8_TFLOPS": "1978.9",
                              "fp4_TFLOPS": "3957.8", "scale_up_link": "nvlink4", "scale_up_size": "8"}),
    "models": ("fuzz-model", {"attention": "gqa", "layers": "4", "hidden": "1024", "heads": "8", "kv_heads": "2",
                              "head_dim": "128", "intermediate": "4096", "vocab": "32000",
                              "tie_embeddings": "false"}),
    "links": ("fuzz-link", {"kind": "scale-up", "line_rate_GBps": "450", "achievable_GBps": "370",
                            "latency_us": "8"}),
    "runtime": ("fuzz-rt", {"eta_mem": "0.8", "eta_compute": "0.7", "eta_attn_compute": "0.5", "eta_attn_mem": "0.8",
                            "kernel_overhead_us": "3", "step_overhead_ms": "1", "usable_hbm_fraction": "0.9",
                            "reserve_GiB": "3", "page_tokens": "16"}),
    "targets": ("fuzz-target", {"ttft_ms": "2000", "tpot_ms": "200", "stat": "p99", "e2e_ms": "30000"}),
    "storage": ("fuzz-tier", {"kind": "ssd", "read_GBps": "7.0", "latency_us": "80", "link_GBps": "7.88",
                              "h2d_GBps": "25.0", "queue_depth": "32", "io_KiB": "128", "block_overhead_us": "20"}),
}

YAML_VALUES = ["-1", "0", "1.0e+300", "-1.0e+300", "1.0e-320", ".nan", ".inf", "-.inf", "9" * 400, '"80"', "'yes'",
               "yes", "true", "null", "~", '""', "[1, 2]", "{a: 1}", "2024-01-01", "0x10", "1_000", "3.5",
               '"\u00fcn\u00ef"', "65537", "16385", "1025", "1048577", "!!binary aGVsbG8=", "&a 3", "*a"]


def _yaml(kind: str, name: str, fields: dict[str, str], extra_lines: list[str] = ()) -> str:
    lines = [f"{kind}:", f"  {name}:"] + [f"    {k}: {v}" for k, v in fields.items()] + list(extra_lines)
    return "\n".join(lines) + "\n"


@st.composite
def preset_files(draw):
    """(file bytes, the kind it targets, the entry name, the changed field or None, what was done)."""
    kind = draw(st.sampled_from(list(ENTRIES)))
    name, fields = ENTRIES[kind]
    fields = dict(fields)
    what = draw(st.sampled_from(["value", "value", "value", "unknown-key", "duplicate-key", "duplicate-entry",
                                 "section-not-mapping", "top-not-mapping", "entry-not-mapping", "bom",
                                 "not-utf8", "unknown-section", "garbage"]))
    field = None
    extra: list[str] = []
    if what == "value":
        field = draw(st.sampled_from(list(fields)))
        fields[field] = draw(st.one_of(st.sampled_from(YAML_VALUES), st.integers(-10**30, 10**30).map(str)))
    elif what == "unknown-key":
        field = draw(st.sampled_from(["layerz", "hbm_gib", "name2", "Sources"]))
        extra = [f"    {field}: 3"]
    elif what == "duplicate-key":
        field = draw(st.sampled_from(list(fields)))
        extra = [f"    {field}: {fields[field]}"]
    text = _yaml(kind, name, fields, extra)
    if what == "duplicate-entry":
        text += f"  {name}:\n" + "".join(f"    {k}: {v}\n" for k, v in fields.items())
    elif what == "section-not-mapping":
        text = f"{kind}: " + draw(st.sampled_from(["h100", "[1, 2]", "3", "''", "true"])) + "\n"
    elif what == "top-not-mapping":
        text = draw(st.sampled_from(["- 1\n- 2\n", "just text\n", "3\n", "[]\n"]))
    elif what == "entry-not-mapping":
        text = f"{kind}:\n  {name}: 7\n"
    elif what == "unknown-section":
        text += "gpus:\n  x: {}\n"
    elif what == "garbage":
        text = draw(st.text(max_size=60))
    raw = text.encode("utf-8")
    if what == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif what == "not-utf8":
        i = draw(st.integers(0, len(raw)))
        raw = raw[:i] + draw(st.sampled_from([b"\xe9", b"\xff", b"\xc3\x28", b"\x80"])) + raw[i:]
    return raw, kind, name, field, what


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=preset_files())
def test_preset_fuzz(case, capsys, tmp_path_factory):
    raw, kind, name, field, what = case
    path = tmp_path_factory.mktemp("presets") / "fuzz.yaml"
    path.write_bytes(raw)
    old = os.environ.get("LLMEXPLORE_PRESETS")
    os.environ["LLMEXPLORE_PRESETS"] = str(path)
    presets.clear_cache()
    try:
        commands = [["presets", kind, "--json"]]
        if kind == "models":
            commands.append(["layouts", "--model", name, "--gpu", "h100-sxm", "--ranks", "1", "--batch", "1",
                             "--context", "16", "--json"])
        elif kind == "hardware":
            commands.append(["layouts", "--model", "llama-3-8b", "--gpu", name, "--ranks", "1", "--batch", "1",
                             "--context", "16", "--json"])
        elif kind == "storage":  # issue 20: every preset kind a command reads
            commands.append(["offload", "--model", "llama-3.2-3b", "--gpu", "h100-sxm", "--storage", name,
                             "--prefix", "4096", "--json"])
        for argv in commands:
            capsys.readouterr()
            code = cli.main(argv)
            out, err = capsys.readouterr()
            if code == 0:
                assert err == ""
                json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
                continue
            assert code == 2, (what, field, err)
            assert out == "" and err.count("\n") == 1 and err.startswith("llmexplore: error: "), (what, err)
            assert "Traceback" not in err
            if what in ("garbage", "top-not-mapping", "section-not-mapping") and f"preset '{name}'" in err:
                continue  # a file that defines no entry: the command names the preset it does not know
            assert "fuzz.yaml" in err, (what, err)  # the file
            if what == "value" and "must be UTF-8" not in err and "not valid YAML" not in err:
                assert field in err or name in err, (what, field, err)  # the entry and field
                assert "must" in err, (what, err)  # the rule
            if what in ("unknown-key", "duplicate-key"):
                assert field in err, (what, err)
    finally:
        if old is None:
            os.environ.pop("LLMEXPLORE_PRESETS", None)
        else:
            os.environ["LLMEXPLORE_PRESETS"] = old
        presets.clear_cache()


@pytest.mark.parametrize("param, value, rule", [
    # issue 20 §2: both passed the parameter checks and then failed inside the notebook
    ("SKEW", "40", "30_moe_expert_parallel: SKEW must be a finite number in [1, 32] [max/mean expert load: at most "
                   "E/k = 256/8 for deepseek-v3], got 40"),
    ("BLOCK_TOKENS", "1", "50_ssd_offload: BLOCK_TOKENS must be an integer in [32, 65,536], got 1"),
])
def test_notebook_parameters_that_failed_inside_the_notebook_are_one_line(param, value, rule, tmp_path, capsys):
    assert cli.main(["report", "-p", param, value, "--out", str(tmp_path / "r")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"llmexplore: error: {rule}\n"
    assert not (tmp_path / "r" / "executed").exists()  # refused before anything ran


def test_calibrate_disk_checks_room_and_a_full_disk_is_one_line(tmp_path, capsys, monkeypatch):
    """Issue 20 §2: a disk without room for the test file gave ENOSPC mid-write; now the free space is checked
    first, and a disk that fills up while writing is still one line."""
    import collections
    import shutil

    from llmexplore.storage import calibrate as cal

    # /proc was a FileNotFoundError from mkdtemp
    assert cli.main(["calibrate-disk", "/proc", "--size-mb", "1", "--block-sizes", "4", "--queue-depths", "1"]) == 2
    assert capsys.readouterr().err == ("llmexplore: error: PATH '/proc' must be a directory where a scratch "
                                       "directory can be written (No such file or directory)\n")

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10 << 20, 8 << 20, 2 << 20))
    argv = ["calibrate-disk", str(tmp_path), "--size-mb", "4", "--block-sizes", "4", "--queue-depths", "1"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must have room for the 4 MB test file: 2.1 MB free; give a smaller --size-mb" in err
    monkeypatch.undo()

    def full(path, size, seed):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cal, "_write_test_file", full)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "writing the 4 MB test file failed (No space left on device)" in err
    assert [p for p in tmp_path.iterdir()] == []  # the scratch directory is gone


@pytest.mark.parametrize("text, rule", [
    # issue 20 §2: a 5,000-digit number was a ValueError from PyYAML's int()
    ("links:\n  x:\n    display_name: X\n    kind: scale-up\n    line_rate_GBps: " + "9" * 5000 + "\n",
     "holds a number too long to read"),
    # ... and an alias bomb inside sources ran 45 s into a MemoryError: the message's repr() expanded it
    ("links:\n  x:\n    display_name: X\n    kind: scale-up\n    line_rate_GBps: 450\n    achievable_GBps: 370\n"
     "    latency_us: 1\n    sources:\n      a: &a [" + ",".join(['"lol"'] * 9) + "]\n"
     + "".join(f"      {n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, n in zip("abcdefgh", "bcdefghi")),
     "sources must be a mapping field -> text"),
])
def test_hostile_preset_files_are_one_line_and_fast(text, rule, tmp_path, capsys, monkeypatch):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    monkeypatch.setenv("LLMEXPLORE_PRESETS", str(path))
    presets.clear_cache()
    try:
        assert cli.main(["presets", "links"]) == 2
    finally:
        presets.clear_cache()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and rule in err and len(err) < 400


def test_a_link_without_latency_prices_its_collectives(tmp_path, capsys, monkeypatch):
    """Issue 20 §2: ``latency_us: 0`` (allowed by the spec) divided by zero in the fitted collectives."""
    path = tmp_path / "p.yaml"
    path.write_text("links:\n  nvlink4:\n    display_name: NVLink 4, no latency\n    kind: scale-up\n"
                    "    line_rate_GBps: 450\n    achievable_GBps: 370\n    latency_us: 0\n    latency_per_rank_us: 0\n")
    monkeypatch.setenv("LLMEXPLORE_PRESETS", str(path))
    presets.clear_cache()
    try:
        assert cli.main(["layouts", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--ranks", "8", "--batch", "8",
                         "--context", "1024", "--json"]) == 0
    finally:
        presets.clear_cache()
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out)


def test_shown_never_expands_a_huge_value():
    from llmexplore._check import shown

    bomb = ["lol"] * 9
    for _ in range(9):
        bomb = [bomb] * 9  # 9**10 leaves, shared
    assert len(shown(bomb)) <= 60 and shown(bomb).startswith("[[[")
    assert shown(9 ** 5000) == "an integer of about 4,771 digits"
    assert shown(int("9" * 400)) == "9" * 48 + "…" + "9" * 10  # still readable


@pytest.mark.parametrize("argv, key, why", [
    # issue 20 §2: nulls in --json answers came without a reason
    (["transfer", "--model", "llama-3-8b", "--prefill-tp", "1024", "--decode-tp", "1", "--json"], "pipelined_ms",
     "no prefill time to overlap: ranks (1024) must divide the query heads of llama-3-8b (32)"),
    (["offload", "--model", "llama-3.2-3b", "--gpu", "h100-sxm", "--storage", "nvme-gen4", "--prefix", "4096",
      "--latency-us", "10000000", "--json"], "break_even_tokens",
     "never: loading does not pay for any prefix up to 2,097,152 tokens"),
])
def test_every_null_of_a_json_answer_has_a_reason(argv, key, why, capsys):
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out[key] is None and out["null_reasons"][key] == why
    nulls = [k for k, v in out.items() if v is None and not k.endswith(("_lo", "_hi"))]  # bands: --band only
    assert set(nulls) <= set(out["null_reasons"]), set(nulls) - set(out["null_reasons"])


def test_print_json_names_each_non_finite_number(capsys):
    _framework.print_json({"a": float("inf"), "b": float("nan"), "c": 1.0, "d": None}, reasons={"b": "why b"})
    out = json.loads(capsys.readouterr().out)
    assert out == {"a": None, "b": None, "c": 1.0, "d": None,
                   "null_reasons": {"a": _framework.NULL_REASONS["inf"], "b": "why b"}}


@pytest.mark.parametrize("more, rule", [
    # issue 20 §2: both were in range and ran out of memory after about a minute
    (["--requests", "1000000", "--osl", "100"], "--requests must be an integer in [1, 200,000], got 1000000"),
    (["--requests", "2000", "--osl", "1048576"], "--requests × --osl must be at most 150,000,000 output tokens"),
])
def test_simulations_that_cannot_fit_are_refused_first(more, rule, capsys):
    assert cli.main(["simulate", "--config", SIM_CFG, "--isl", "100", "--rate", "1", *more]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and rule in err


def test_a_config_with_a_million_sides_is_refused_before_reading_them(tmp_path, capsys):
    """Issue 20 §2: a --config with 10⁶ sides took over 30 s (every side was checked before their count)."""
    cfg = json.loads(SIM_CFG)
    cfg["sides"] = cfg["sides"] * 1_000_000
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    assert cli.main(["simulate", "--config", str(path), "--isl", "10", "--osl", "10", "--rate", "1", "--json"]) == 2
    assert capsys.readouterr().err == ("llmexplore: error: --config['sides'] must hold 1 side (colocated) for mode "
                                       "'colocated', got 1,000,000\n")


# ---- file inputs (issue 20: "the fuzz covers every command and every file input") ------------------------------
_VLLM_RUN = {"backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": 64,
             "max_concurrency": 8, "duration": 10.0, "completed": 64, "failed": 0, "total_input_tokens": 65536,
             "total_output_tokens": 8192, "request_throughput": 6.4, "output_throughput": 819.2,
             "mean_ttft_ms": 50.0, "median_ttft_ms": 48.0, "mean_tpot_ms": 8.0, "median_tpot_ms": 8.0,
             "mean_itl_ms": 8.0, "mean_e2el_ms": 1066.0}


def _valid_files() -> dict[str, tuple[str, list[str]]]:
    """Per file input: (valid content, the command line with FILE where the file goes)."""
    from llmexplore import validate as val

    head, *rows = val.VALIDATION_CSV.read_text().splitlines()
    own = "my-1,decode,llama-3-8b,h100-sxm,1,TP,1,,bf16,bf16,,,16,2000,,,,8.5,ms" + "," * (head.count(",") - 18)
    cfg = json.loads(SIM_CFG)
    return {
        "simulate --config": (json.dumps(cfg), ["simulate", "--config", "FILE", "--isl", "64", "--osl", "8", "--rate", "1",
                                                "--requests", "20"]),
        "simulate --trace": ("arrival_s,prompt_tokens,output_tokens\n0.0,64,8\n0.5,128,4\n1.0,32,2\n",
                             ["simulate", "--config", SIM_CFG, "--trace", "FILE", "--isl", "64", "--osl", "8",
                              "--requests", "20"]),
        "calibrate --data": (DATA.read_text(), ["calibrate", "--data", "FILE"]),
        "validate --data": (head + "\n" + own + "\n", ["validate", "--data", "FILE"]),
        "validate --e2e --data": (json.dumps(_VLLM_RUN), ["validate", "--e2e", "--data", "FILE", "--config",
                                                          json.dumps({**cfg, "model": "llama-3-8b", "gpu": "h100-sxm"})]),
        "report --notebook": ((Path(__file__).resolve().parents[1] / "fixtures" / "explorer_fixture.ipynb").read_text(),
                              ["report", "--notebook", "FILE", "--out", "reports-fuzz"]),
    }


_MUTATIONS = ["empty", "binary", "not-utf8", "bom", "crlf", "header-only", "truncate", "huge-cell", "nan", "negative",
              "1e400", "text-for-number", "deep-json", "duplicate-line", "drop-column", "swap-columns", "directory"]


@st.composite
def file_cases(draw):
    name = draw(st.sampled_from(sorted(_valid_files())))
    what = draw(st.sampled_from(_MUTATIONS))
    return name, what, draw(st.integers(0, 10_000))


def _mutate(text: str, what: str, seed: int) -> bytes | None:
    import random

    rng = random.Random(seed)
    lines = text.splitlines()
    numbers = [m for m in re.finditer(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", text)]
    if what == "empty":
        return b""
    if what == "binary":
        return bytes(rng.randrange(256) for _ in range(200))
    if what == "not-utf8":
        i = rng.randrange(len(text) + 1)
        return text[:i].encode() + b"\xff\xfe" + text[i:].encode()
    if what == "bom":
        return b"\xef\xbb\xbf" + text.encode()
    if what == "crlf":
        return text.replace("\n", "\r\n").encode()
    if what == "header-only":
        return (lines[0] + "\n").encode()
    if what == "truncate":
        return text[: rng.randrange(1, max(2, len(text)))].encode()
    if what == "huge-cell":
        i = rng.randrange(len(text) + 1)
        return (text[:i] + "9" * 200_000 + text[i:]).encode()
    if what in ("nan", "negative", "1e400", "text-for-number") and numbers:
        m = rng.choice(numbers)
        new = {"nan": "NaN", "negative": "-" + m.group(0), "1e400": "1e400", "text-for-number": "abc"}[what]
        return (text[:m.start()] + new + text[m.end():]).encode()
    if what == "deep-json":
        return ("[" * 100_000 + "]" * 100_000).encode()
    if what == "duplicate-line" and len(lines) > 1:
        return "\n".join(lines + [lines[-1]]).encode() + b"\n"
    if what == "drop-column" and "," in lines[0]:
        k = rng.randrange(lines[0].count(",") + 1)
        return "\n".join(",".join(c for j, c in enumerate(line.split(",")) if j != k) for line in lines).encode()
    if what == "swap-columns" and lines[0].count(",") >= 1:
        def swap(line):
            cells = line.split(",")
            cells[0], cells[1] = cells[1], cells[0]
            return ",".join(cells)
        return "\n".join([swap(line) for line in lines]).encode()
    if what == "directory":
        return None
    return text.encode()


@pytest.mark.timeout(900)
def test_file_input_fuzz(capsys, no_reports, monkeypatch, tmp_path):
    """Every file a command reads (a config, a trace, measurements, a benchmark JSON, a notebook) gets hostile
    content; the outcome is a clean answer or one error line, never a traceback (the same contract as the flags,
    with the flag that names the file)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LLMEXPLORE_PRESETS", raising=False)
    presets.clear_cache()
    valid = _valid_files()
    # report: the notebook files are read and checked as the real build does, then nothing is executed
    monkeypatch.setattr(report, "build_reports", lambda **kw: [
        *report._resolve_notebooks(kw["notebooks"]), Path(kw["out_dir"]) / "index.html"][-1:])
    seen: dict[tuple, int] = {}

    @settings(FUZZ, max_examples=120)
    @given(case=file_cases())
    def run(case):
        name, what, seed = case
        text, argv = valid[name]
        raw = _mutate(text, what, seed)
        path = tmp_path / f"input-{seed}"
        if raw is None:
            path.mkdir(exist_ok=True)
        else:
            path.write_bytes(raw)
        argv = [str(path) if a == "FILE" else a for a in argv]
        capsys.readouterr()
        code = cli.main(argv)
        out, err = capsys.readouterr()
        flag = argv[argv.index(str(path)) - 1]
        seen[(name, code)] = seen.get((name, code), 0) + 1
        if code == 0:
            assert err == "", (name, what, err)
            return
        assert code == 2, (name, what, code, err)
        assert out == "" and err.count("\n") == 1 and err.startswith("llmexplore: error: "), (name, what, err)
        assert "Traceback" not in err
        # the file is named: by its flag, its path or the file itself (a line number in it)
        assert flag in err or str(path) in err or path.name in err, (name, what, err)

    run()
    # every file input was tried, and the hostile content was refused somewhere (the fuzz is not idle)
    assert {n for n, _ in seen} == set(valid) and any(c == 2 for _, c in seen), seen

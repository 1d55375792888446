"""Notebook parameters: each notebook's ``parameters`` cell checked before anything runs, in one place beside the
notebook registry (:func:`llmexplore.nbtools.parameter_checker`).

One function per notebook takes ``{NAME: value}`` as the ``parameters`` cell defines it (the names are the
notebook's, so they live here and not in the sweeps) and returns ``{NAME: note}`` for values it adjusted; a bad
value is one SpecError naming the parameter, the value and the rule. The report builder and every notebook's
first cell ask the same function (``nbtools.check_parameters``).
"""

from __future__ import annotations

from . import _check, kernelfit, presets
from .deployment import MAX_RANKS
from .models.moe import decode as moe_model
from .models.offload import cost as of
from .models.step.engine import MAX_BATCH, MAX_CONTEXT, Deployment
from .transfer.buffers import MAX_PAGE_TOKENS
from .errors import LlmexploreError, SpecError, UnknownPresetError
from .sweeps import disagg, fidelity, layouts, moe, offload, plan, speculative, transfer
from .units import dtype_bytes

__all__ = ["check_index_parameters", "check_fidelity_parameters", "check_layouts_parameters",
           "check_disagg_parameters", "check_moe_parameters", "check_transfer_parameters",
           "check_offload_parameters", "check_plan_parameters"]


# ---- helpers ------------------------------------------------------------------------------------------------
def preset_param(name: str, kind: str, value):
    """The preset of ``kind`` a notebook parameter names; SpecError naming the parameter and the choices."""
    try:
        return presets.resolve(kind, value)
    except (UnknownPresetError, SpecError):
        raise SpecError(f"{name} must name a preset in data/{kind}.yaml ({', '.join(presets.names(kind))}), "
                        f"got {value!r}") from None


def int_param(name: str, value, lo: int, hi: int) -> int:
    return _check.integer(name, value, lo=lo, hi=hi)


def range_param(name: str, value, lo: float, hi: float, *, unit: str = "", integer: bool = False,
                lo_open: bool = False) -> tuple:
    """A grid extent ``[first, last]``: two numbers with ``lo <= first < last <= hi`` (``lo_open``: first > lo);
    SpecError naming the parameter, the value and the rule."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise SpecError(f"{name} must be a grid extent [first, last]{' [' + unit + ']' if unit else ''}, got "
                        f"{_check.shown(value)}")
    check = _check.integer if integer else _check.number
    kw = {} if integer else {"lo_open": lo_open}
    a = check(f"{name}[0]", value[0], lo=lo, hi=hi, unit=unit, **kw)
    b = check(f"{name}[1]", value[1], lo=lo, hi=hi, unit=unit, **kw)
    if not a < b:
        raise SpecError(f"{name} must be a grid extent [first, last] with first < last, got {_check.shown(value)}")
    return a, b


def built(names: str, make, rename: dict[str, str] | None = None):
    """``make()`` with any error re-worded to name the notebook parameters involved: a message that starts
    with an argument in ``rename`` (``"ranks (3) must divide ..."``) gets the parameter's name instead."""
    try:
        return make()
    except LlmexploreError as exc:
        text = str(exc)
        arg = next((a for a in (rename or {}) if text.startswith(a + " ")), None)
        raise SpecError(rename[arg] + text[len(arg):] if arg else f"{names}: {text}") from None


def model_and_presets(p, **kinds) -> object:
    """The MODEL preset, after checking every other parameter that names a preset (``NAME="kind"``, in order)
    and KV_DTYPE: the opening checks of the KV-cache notebooks (40, 50)."""
    m = preset_param("MODEL", "models", p["MODEL"])
    for name, kind in kinds.items():
        preset_param(name, kind, p[name])
    dtype_bytes(p["KV_DTYPE"], "KV_DTYPE")
    return m


def check_index_parameters(params) -> dict[str, str]:
    """Parameters of ``notebooks/00_index.ipynb``: KIND is one of the preset kinds."""
    _check.choice("KIND", params["KIND"], presets.KINDS)
    return {}


def check_fidelity_parameters(p) -> dict[str, str]:
    """Validate the parameters of ``notebooks/05_fidelity.ipynb`` (``{NAME: value}``); SpecError naming the
    parameter, the value and the rule. A GPU preset without kernel measurements does not apply here."""
    fidelity.check_runtime_choice("PRICING", p["PRICING"])
    fidelity.check_runtime_choice("BASELINE", p["BASELINE"])
    hw = preset_param("GPU", "hardware", p["GPU"])
    _check.choice("ENGINE", p["ENGINE"], fidelity.ENGINES)
    _check.number("BAND_PCT", p["BAND_PCT"], lo=0, lo_open=True, hi=1000, unit="%")
    _check.number("MARGIN_PCT", p["MARGIN_PCT"], lo=0, hi=1000, unit="%")
    if hw.name not in kernelfit.GPUS:
        borrowed = presets.KERNEL_GPU_FALLBACK.get(hw.name)
        if borrowed:
            why = f"{hw.name} has no kernel measurements of its own (it borrows the {borrowed} curves: choose {borrowed})"
        elif hw.name in kernelfit.ROCM_GPUS:
            why = (f"{hw.name} has no kernel measurements beyond its FP8 GEMMs (aiter's tuned table), too few for this "
                   f"notebook's curve figures (data/kernels/ covers {', '.join(kernelfit.GPUS)} in full)")
        else:
            why = f"{hw.name} has no kernel measurements (data/kernels/ covers {', '.join(kernelfit.GPUS)})"
        return {"GPU": why}
    return {}


def check_layouts_parameters(p) -> dict[str, str]:
    """Validate the parameters of ``notebooks/10_attention_layouts.ipynb`` (``{NAME: value}``).

    Raises SpecError naming the parameter, the value and the rule; returns ``{}`` (every valid value applies).
    Bounds keep a report run to minutes: at most 1,000 points per grid axis and 100,000 trace segments.
    """
    for name, kind in (("MODEL", "models"), ("GPU", "hardware"), ("GQA_MODEL", "models"), ("GQA_GPU", "hardware"),
                       ("RUNTIME", "runtime")):
        preset_param(name, kind, p[name])
    for name in ("WEIGHT_DTYPE", "KV_DTYPE"):
        if not isinstance(p[name], str) or p[name] not in layouts.NOTEBOOK_DTYPES:
            raise SpecError(f"{name} must be one of {', '.join(layouts.NOTEBOOK_DTYPES)} (the dtypes this notebook and "
                            f"its explorer offer), got {p[name]!r}")
    preset_param("GPU", "hardware", p["GPU"]).check_dtype(p["WEIGHT_DTYPE"], "WEIGHT_DTYPE")
    for name in ("RANKS", "GQA_RANKS"):
        int_param(name, p[name], 1, MAX_RANKS)
    int_param("BATCH", p["BATCH"], 1, MAX_BATCH)
    int_param("BATCH_MAX", p["BATCH_MAX"], 1, MAX_BATCH)
    _check.number("CONTEXT", p["CONTEXT"], lo=1, hi=MAX_CONTEXT)
    lo = _check.number("CONTEXT_MIN", p["CONTEXT_MIN"], lo=1, hi=MAX_CONTEXT)
    hi = _check.number("CONTEXT_MAX", p["CONTEXT_MAX"], lo=1, hi=MAX_CONTEXT)
    if hi <= lo:
        raise SpecError(f"CONTEXT_MAX must be greater than CONTEXT_MIN ({p['CONTEXT_MIN']!r}), got {p['CONTEXT_MAX']!r}")
    int_param("N_CONTEXT", p["N_CONTEXT"], 2, 1000)
    int_param("N_BATCH", p["N_BATCH"], 1, 1000)
    int_param("TRACE_BATCH", p["TRACE_BATCH"], 1, 1 << 16)
    int_param("TRACE_PROMPT", p["TRACE_PROMPT"], 1, MAX_CONTEXT)
    _check.number("TRACE_MEAN_OUTPUT", p["TRACE_MEAN_OUTPUT"], lo=1, hi=1 << 24)
    seg = int_param("TRACE_SEGMENT", p["TRACE_SEGMENT"], 1, 1 << 24)
    if p["TRACE_MEAN_OUTPUT"] / seg > 100_000:
        raise SpecError(f"TRACE_SEGMENT must be at least TRACE_MEAN_OUTPUT / 100,000 (at most 100,000 segments "
                        f"per trace), got {seg!r}")
    _check.number("HORIZON_STEPS", p["HORIZON_STEPS"], lo=1, hi=1e12)
    _check.number("FLUCT_MEAN_BATCH", p["FLUCT_MEAN_BATCH"], lo=1, hi=MAX_BATCH)
    _check.number("FLUCT_BATCH_SD", p["FLUCT_BATCH_SD"], lo=0, hi=MAX_BATCH)
    _check.number("FLUCT_CONTEXT", p["FLUCT_CONTEXT"], lo=1, hi=MAX_CONTEXT)
    int_param("FLUCT_SEGMENTS", p["FLUCT_SEGMENTS"], 1, 100_000)
    int_param("FLUCT_SEGMENT_STEPS", p["FLUCT_SEGMENT_STEPS"], 1, 1 << 24)
    int_param("SEED", p["SEED"], 0, 2**32 - 1)
    int_param("PP", p["PP"], 1, 128)
    if p["SPECULATIVE"] is not None:
        preset_param("SPECULATIVE", "speculative", p["SPECULATIVE"])
    dep = built("MODEL, GPU, RANKS", lambda: Deployment.build(p["MODEL"], p["GPU"], p["RANKS"], runtime=p["RUNTIME"],
                                                                weight_dtype=p["WEIGHT_DTYPE"], kv_dtype=p["KV_DTYPE"]),
                {"ranks": "RANKS"})
    names = {"pp": "PP", "speculative": "SPECULATIVE", "accepted_length": "ACCEPTED_LENGTH"}
    dec = built("MODEL, PP, SPECULATIVE", lambda: layouts.decoding(dep, p["PP"], p["SPECULATIVE"],
                                                                   p["ACCEPTED_LENGTH"]), names)
    gqa = built("GQA_MODEL, GQA_GPU, GQA_RANKS", lambda: Deployment.build(p["GQA_MODEL"], p["GQA_GPU"], p["GQA_RANKS"],
                                                                         runtime=p["RUNTIME"]), {"ranks": "GQA_RANKS"})
    built("GQA_MODEL, PP", lambda: layouts.contrast_decoding(gqa, dec), {"pp": "PP"})
    built("GQA_MODEL, GQA_GPU, GQA_RANKS", lambda: Deployment.build(p["GQA_MODEL"], p["GQA_GPU"], p["GQA_RANKS"],
                                                                    runtime=p["RUNTIME"]),
           {"ranks": "GQA_RANKS"})
    return {}


def check_speculative_parameters(p) -> dict[str, str]:
    """Validate the parameters of ``notebooks/15_speculative_decoding.ipynb`` (``{NAME: value}``); SpecError
    naming the parameter, the value and the rule (an accepted length outside [1, k + 1] is named by
    ACCEPTED_LENGTH). Returns ``{"MODEL": why}`` for a model without an MTP module while SPECULATIVE drafts with
    one: a valid preset this notebook cannot use (the report builder then keeps the default here)."""
    for name, kind in (("MODEL", "models"), ("GPU", "hardware"), ("RUNTIME", "runtime"),
                       ("SPECULATIVE", "speculative")):
        preset_param(name, kind, p[name])
    m, spec = presets.model(p["MODEL"]), presets.speculative(p["SPECULATIVE"])
    if spec.method == "mtp" and m.mtp_layers < 1:  # a valid model this draft cannot run on: the default stays
        mtp = [n for n, x in presets.table("models").items() if x.mtp_layers > 0]
        return {"MODEL": f"{m.name} has no MTP module, which SPECULATIVE = {spec.name!r} drafts with; this notebook "
                         f"then needs a model that has one ({', '.join(mtp)}), or a draft-head or n-gram SPECULATIVE"}
    int_param("RANKS", p["RANKS"], 1, MAX_RANKS)
    int_param("CONTEXT", p["CONTEXT"], 1, 1 << 24)
    int_param("BATCH", p["BATCH"], 1, 1 << 20)
    range_param("BATCH_RANGE", p["BATCH_RANGE"], 1, 1 << 20, unit="sequences", integer=True)
    int_param("N_BATCHES", p["N_BATCHES"], 2, 200)
    int_param("N_ACCEPTED", p["N_ACCEPTED"], 2, 50)
    if p["ACCEPTED_LENGTH"] is not None:
        _check.number("ACCEPTED_LENGTH", p["ACCEPTED_LENGTH"], lo=1.0, hi=1e6)
    if p["WEIGHT_DTYPE"] is not None:
        dtype_bytes(p["WEIGHT_DTYPE"], "WEIGHT_DTYPE")
    dtype_bytes(p["KV_DTYPE"], "KV_DTYPE")
    rename = {"ranks": "RANKS", "accepted_length": "ACCEPTED_LENGTH", "context": "CONTEXT",
              "weight_dtype": "WEIGHT_DTYPE", "kv_dtype": "KV_DTYPE", "speculative": "SPECULATIVE"}
    built("MODEL, GPU, RANKS, SPECULATIVE", lambda: speculative.setup(
        p["MODEL"], p["GPU"], p["RANKS"], speculative=p["SPECULATIVE"], accepted_length=p["ACCEPTED_LENGTH"],
        context=p["CONTEXT"], runtime=p["RUNTIME"], weight_dtype=p["WEIGHT_DTYPE"], kv_dtype=p["KV_DTYPE"]),
        rename)
    return {}


def check_disagg_parameters(p) -> dict[str, str]:
    """Validate the parameters of ``notebooks/20_pd_disaggregation.ipynb`` (``{NAME: value}``).

    Raises SpecError naming the parameter, the value and the rule; returns ``{}`` (every valid value applies).
    Bounds keep a report run to minutes (grids of at most 1,000 points, 20 million simulated requests).
    """

    for name, kind in (("MODEL", "models"), ("GPU", "hardware"), ("LINK", "links"), ("RUNTIME", "runtime"),
                       ("PRICE_TIER", "prices")):
        preset_param(name, kind, p[name])
    int_param("PREFILL_TP", p["PREFILL_TP"], 1, MAX_RANKS)
    int_param("DECODE_TP", p["DECODE_TP"], 1, MAX_RANKS)
    int_param("DECODE_PP", p["DECODE_PP"], 1, 128)
    int_param("PREFILL_PP", p["PREFILL_PP"], 1, 128)
    int_param("PROMPT", p["PROMPT"], 1, 1 << 24)
    int_param("OUTPUT", p["OUTPUT"], 1, 1 << 24)
    _check.number("RATE", p["RATE"], lo=0, lo_open=True, hi=1e6)
    _check.number("TTFT_SLO_MS", p["TTFT_SLO_MS"], lo=0, lo_open=True, hi=1e9)
    _check.number("TPOT_SLO_MS", p["TPOT_SLO_MS"], lo=0, lo_open=True, hi=1e9)
    int_param("N_RATES", p["N_RATES"], 2, 1000)
    int_param("N_BANDWIDTHS", p["N_BANDWIDTHS"], 2, 1000)
    for name in ("PROMPTS", "OUTPUTS"):
        if not isinstance(p[name], (list, tuple)) or not 1 <= len(p[name]) <= 100:
            raise SpecError(f"{name} must be a list of 1 to 100 token counts, e.g. [512, 1024], got {p[name]!r}")
        for i, v in enumerate(p[name]):
            int_param(f"{name}[{i}]", v, 1, 1 << 24)
    int_param("GRID_MAX", p["GRID_MAX"], 1, 256)
    int_param("SIM_REQUESTS", p["SIM_REQUESTS"], 1000, 20_000_000)
    range_param("RATE_SPAN", p["RATE_SPAN"], 0, 100, lo_open=True)
    for name in ("TRANSFER_GBPS", "ONE_NIC_GBPS", "NIC_PER_GPU_GBPS"):
        range_param(name, p[name], 0, 1e6, unit="GB/s", lo_open=True)
    sig = p["PROMPT_SIGMAS"]
    if not isinstance(sig, (list, tuple)) or not 1 <= len(sig) <= 20:
        raise SpecError(f"PROMPT_SIGMAS must be a list of 1 to 20 log-sds, e.g. [0.0, 0.5], got {sig!r}")
    for i, v in enumerate(sig):
        _check.number(f"PROMPT_SIGMAS[{i}]", v, lo=0.0, hi=3.0)
    if p["SPECULATIVE"] is not None:
        preset_param("SPECULATIVE", "speculative", p["SPECULATIVE"])
    names = {"prefill_tp": "PREFILL_TP", "decode_tp": "DECODE_TP", "prompt_tokens": "PROMPT",
             "output_tokens": "OUTPUT", "rate_per_s": "RATE", "ttft_slo_ms": "TTFT_SLO_MS",
             "tpot_slo_ms": "TPOT_SLO_MS", "model": "MODEL", "gpu": "GPU", "speculative": "SPECULATIVE",
             "accepted_length": "ACCEPTED_LENGTH", "decode_pp": "DECODE_PP", "prefill_pp": "PREFILL_PP"}
    built("MODEL, GPU, PREFILL_TP, DECODE_TP", lambda: disagg.setup(
        p["MODEL"], p["GPU"], prefill_tp=p["PREFILL_TP"], decode_tp=p["DECODE_TP"], prompt_tokens=p["PROMPT"],
        output_tokens=p["OUTPUT"], rate_per_s=p["RATE"], ttft_slo_ms=p["TTFT_SLO_MS"],
        tpot_slo_ms=p["TPOT_SLO_MS"], runtime=p["RUNTIME"], speculative=p["SPECULATIVE"],
        accepted_length=p["ACCEPTED_LENGTH"], decode_pp=p["DECODE_PP"], prefill_pp=p["PREFILL_PP"]), names)
    return {}


def check_moe_parameters(p) -> dict[str, str]:
    """Validate the parameters of ``notebooks/30_moe_expert_parallel.ipynb`` (``{NAME: value}``).

    Raises SpecError naming the parameter, the value and the rule. Returns ``{"MODEL": why}`` for a dense
    model: a valid preset that this notebook cannot use (the report builder then keeps the default here).
    """

    m = preset_param("MODEL", "models", p["MODEL"])
    preset_param("GPU", "hardware", p["GPU"])
    preset_param("RUNTIME", "runtime", p["RUNTIME"])
    preset_param("PRICE_TIER", "prices", p["PRICE_TIER"])
    if not m.is_moe:
        moe_names = [n for n, x in presets.table("models").items() if x.is_moe]
        return {"MODEL": f"{m.name} is a dense model; this notebook needs a MoE model ({', '.join(moe_names)})"}
    gpus = int_param("GPUS", p["GPUS"], 1, moe_model.MAX_GPUS)
    tp = int_param("TP", p["TP"], 1, moe_model.MAX_GPUS)
    options = built("MODEL, GPU, GPUS", lambda: moe.layout_options(gpus, m.name, p["GPU"]))
    tps = [t for _, t, e in options if e > 1]
    if tp not in tps:
        raise SpecError(f"TP must be one of {tps} (a TP group inside one node that leaves expert parallelism "
                        f"for {gpus} GPUs of {m.name}), got {p['TP']!r}")
    if 1 not in tps:
        raise SpecError(f"GPUS must be a divisor of the routed experts of {m.name} ({m.routed_experts}) so that "
                        f"DPA + EP{gpus} exists, got {p['GPUS']!r}")
    # a token picks an expert at most once, so no expert's share of the routed load exceeds 1/k: max/mean <= E/k
    top = m.routed_experts / m.experts_per_token
    _check.number("SKEW", p["SKEW"], lo=1.0, hi=top, unit=f"max/mean expert load: at most E/k = "
                  f"{m.routed_experts}/{m.experts_per_token} for {m.name}")
    int_param("BATCH", p["BATCH"], 1, 1 << 24)
    int_param("CONTEXT", p["CONTEXT"], 1, 1 << 30)
    for name, most in (("REDUNDANT", 16), ("BATCHES", 64)):
        if not isinstance(p[name], (list, tuple)) or not 1 <= len(p[name]) <= most:
            raise SpecError(f"{name} must be a list of 1 to {most} integers, got {p[name]!r}")
    for i, r in enumerate(p["REDUNDANT"]):
        int_param(f"REDUNDANT[{i}]", r, 0, moe_model.MAX_REDUNDANT)
    for i, b in enumerate(p["BATCHES"]):
        int_param(f"BATCHES[{i}]", b, 1, 1 << 24)
    int_param("N_SKEWS", p["N_SKEWS"], 2, 500)
    int_param("MC_TRIALS", p["MC_TRIALS"], 1, 100_000)
    if not isinstance(p["MC_TOKENS"], (list, tuple)) or not 1 <= len(p["MC_TOKENS"]) <= 16:
        raise SpecError(f"MC_TOKENS must be a list of 1 to 16 token counts, got {p['MC_TOKENS']!r}")
    for i, t in enumerate(p["MC_TOKENS"]):
        int_param(f"MC_TOKENS[{i}]", t, 1, 1 << 16)
    red = max(p["REDUNDANT"])
    if red == 0:
        raise SpecError(f"REDUNDANT must hold at least one count > 0 to compare against, got {p['REDUNDANT']!r}")
    built("TP, REDUNDANT", lambda: moe.config(m.name, p["GPU"], gpus, tp=tp, ep=gpus // tp, redundant=red,
                                          runtime=p["RUNTIME"]))
    built("GPUS, REDUNDANT", lambda: moe.config(m.name, p["GPU"], gpus, tp=1, ep=gpus, redundant=red,
                                            runtime=p["RUNTIME"]))
    int_param("PP", p["PP"], 1, 128)
    if p["SPECULATIVE"] is not None:
        preset_param("SPECULATIVE", "speculative", p["SPECULATIVE"])
    md = built("MODEL, GPU, GPUS, TP", lambda: moe.config(m.name, p["GPU"], gpus, tp=tp, ep=gpus // tp,
                                                          runtime=p["RUNTIME"]))
    built("MODEL, PP, SPECULATIVE", lambda: moe.decoding(md, p["PP"], p["SPECULATIVE"], p["ACCEPTED_LENGTH"]),
          {"pp": "PP", "speculative": "SPECULATIVE", "accepted_length": "ACCEPTED_LENGTH"})
    return {}


def check_transfer_parameters(p) -> dict[str, str]:
    """Validate the parameters of ``notebooks/40_kv_transfer.ipynb`` (``{NAME: value}``); SpecError naming the
    parameter, the value and the rule."""
    m = model_and_presets(p, GPU="hardware", LINK="links", RUNTIME="runtime")
    sizes = {}
    for name, hi in (("PREFILL_TP", transfer.MAX_TP), ("PREFILL_DP", transfer.MAX_DP),
                     ("DECODE_TP", transfer.MAX_TP), ("DECODE_DP", transfer.MAX_DP)):
        sizes[name] = int_param(name, p[name], 1, hi)
    int_param("PAGE_SIZE", p["PAGE_SIZE"], 1, MAX_PAGE_TOKENS)
    int_param("PROMPT_TOKENS", p["PROMPT_TOKENS"], 1, 1 << 24)
    range_param("PROMPT_RANGE", p["PROMPT_RANGE"], 1, 1 << 24, unit="tokens", integer=True)
    pairing = p["DP_PAIRING"]
    if not isinstance(pairing, str) or pairing not in transfer.DP_PAIRINGS:
        raise SpecError(f"DP_PAIRING must be one of {', '.join(transfer.DP_PAIRINGS)}, got {pairing!r}")
    if pairing == "index" and sizes["DECODE_DP"] > sizes["PREFILL_DP"]:
        raise SpecError(f"DECODE_DP must be <= PREFILL_DP ({sizes['PREFILL_DP']}) with DP_PAIRING = 'index' (decode "
                        f"DP group k receives from prefill DP group k, as in version 1), got {sizes['DECODE_DP']}; "
                        f"set DP_PAIRING = 'any' to route each request from any prefill DP group")
    for name in ("PREFILL_PP", "DECODE_PP"):
        sizes[name] = int_param(name, p[name], 1, transfer.MAX_PP)
    if p["SPECULATIVE"] is not None:
        preset_param("SPECULATIVE", "speculative", p["SPECULATIVE"])
    built("PREFILL_TP, DECODE_TP, PREFILL_DP, DECODE_DP, PAGE_SIZE",
          lambda: transfer.setup(m.name, prefill_tp=sizes["PREFILL_TP"], decode_tp=sizes["DECODE_TP"],
                                 prefill_dp=sizes["PREFILL_DP"], decode_dp=sizes["DECODE_DP"],
                                 page_size=p["PAGE_SIZE"], kv_dtype=p["KV_DTYPE"], gpu=p["GPU"], link=p["LINK"],
                                 prompt_tokens=p["PROMPT_TOKENS"], dp_pairing=pairing, runtime=p["RUNTIME"],
                                 prefill_pp=sizes["PREFILL_PP"], decode_pp=sizes["DECODE_PP"],
                                 speculative=p["SPECULATIVE"]),
          # the longer names first: a message is renamed by the first argument it starts with
          rename={"prefill_tp x prefill_dp": "PREFILL_TP x PREFILL_DP",
                  "decode_tp x decode_dp": "DECODE_TP x DECODE_DP",
                  "prefill_pp x prefill_tp x prefill_dp": "PREFILL_PP x PREFILL_TP x PREFILL_DP",
                  "decode_pp x decode_tp x decode_dp": "DECODE_PP x DECODE_TP x DECODE_DP",
                  "prefill_pp x prefill_tp": "PREFILL_PP x PREFILL_TP", "decode_pp x decode_tp": "DECODE_PP x DECODE_TP",
                  "prefill_pp": "PREFILL_PP", "decode_pp": "DECODE_PP", "speculative": "SPECULATIVE",
                  "prefill_tp": "PREFILL_TP", "decode_tp": "DECODE_TP", "page_size": "PAGE_SIZE"})
    return {}


def check_offload_parameters(p) -> dict[str, str]:
    """Validate the parameters of ``notebooks/50_ssd_offload.ipynb`` (``{NAME: value}``); SpecError naming the
    parameter, the value and the rule."""
    m = model_and_presets(p, GPU="hardware", STORAGE="storage", RUNTIME="runtime", PRICE_TIER="prices")
    tp = int_param("TP", p["TP"], 1, MAX_RANKS)
    int_param("PREFIX", p["PREFIX"], 0, of.MAX_PREFIX)
    # the break-even search steps by whole blocks up to of.MAX_PREFIX in at most 65,536 steps
    int_param("BLOCK_TOKENS", p["BLOCK_TOKENS"], of.MIN_SEARCH_BLOCK_TOKENS, 1 << 16)
    _check.number("QUEUE_WAIT_MS", p["QUEUE_WAIT_MS"], lo=0, hi=1e9)
    _check.probability("HIT_RATIO", p["HIT_RATIO"])
    _check.number("RATE", p["RATE"], lo=0, lo_open=True, hi=1e6)
    int_param("PROMPT_TOKENS", p["PROMPT_TOKENS"], 1, of.MAX_PREFIX)
    _check.number("TTFT_SLO_MS", p["TTFT_SLO_MS"], lo=0, lo_open=True, hi=1e9)
    _check.number("STAGING_GB", p["STAGING_GB"], lo=0, hi=1e6)
    block = int(p["BLOCK_TOKENS"])
    int_param("PREFIX_MAX", p["PREFIX_MAX"], block + 1, of.MAX_PREFIX)
    int_param("NEAR_PREFIX_MAX", p["NEAR_PREFIX_MAX"], block, min(of.MAX_PREFIX, 100_000 * block))
    range_param("BANDWIDTH_RANGE_GBPS", p["BANDWIDTH_RANGE_GBPS"], 0, 1e6, unit="GB/s", lo_open=True)
    range_param("LATENCY_RANGE_US", p["LATENCY_RANGE_US"], 0, 1e9, unit="µs", lo_open=True)
    range_param("QUEUE_WAIT_RANGE_MS", p["QUEUE_WAIT_RANGE_MS"], 0, 1e9, unit="ms")
    int_param("PP", p["PP"], 1, 128)
    if p["SPECULATIVE"] is not None:
        preset_param("SPECULATIVE", "speculative", p["SPECULATIVE"])
    s = built("MODEL, GPU, TP", lambda: offload.setup(m.name, p["GPU"], storage=p["STORAGE"], tp=tp,
                                                      kv_dtype=p["KV_DTYPE"], block_tokens=p["BLOCK_TOKENS"],
                                                      runtime=p["RUNTIME"]),
              rename={"tp": "TP"})
    # the longer names first: a message is renamed by the first argument it starts with
    s = built("MODEL, PP, SPECULATIVE", lambda: offload.setup(m.name, p["GPU"], storage=p["STORAGE"], tp=tp,
                                                              kv_dtype=p["KV_DTYPE"], block_tokens=p["BLOCK_TOKENS"],
                                                              runtime=p["RUNTIME"], pp=p["PP"],
                                                              speculative=p["SPECULATIVE"]),
              rename={"pp x tp": "PP x TP", "pp": "PP", "speculative": "SPECULATIVE"})
    full_ms = float(of.prefill_parts(s.dep, int(p["PROMPT_TOKENS"]), 0, **s.dec)["latency_s"]) * 1e3
    if float(p["TTFT_SLO_MS"]) <= full_ms:
        raise SpecError(f"TTFT_SLO_MS must exceed the prefill of one PROMPT_TOKENS = {int(p['PROMPT_TOKENS']):,}-token "
                        f"prompt without a cache hit ({full_ms:,.0f} ms on {s.dep.ranks}x {s.dep.hardware.label}"
                        f"{f' x PP{s.pp}' if s.pp > 1 else ''}), got {p['TTFT_SLO_MS']!r}: no pool could meet it")
    return {}


def check_plan_parameters(p) -> dict[str, str]:
    """Validate the parameters of ``notebooks/60_deployment_planner.ipynb`` (``{NAME: value}``); SpecError
    naming the parameter, the value and the rule."""
    preset_param("MODEL", "models", p["MODEL"])
    preset_param("GPU", "hardware", p["GPU"])
    preset_param("RUNTIME", "runtime", p["RUNTIME"])
    if p["LINK"] is not None:
        preset_param("LINK", "links", p["LINK"])
    for name in ("WEIGHT_DTYPES", "KV_DTYPES"):
        v = p[name]
        if v is not None and not (isinstance(v, (list, tuple)) and v and all(isinstance(x, str) for x in v)):
            raise SpecError(f"{name} must be None (the default search) or a non-empty list of dtype names, "
                            f"got {v!r}")
    sizes = p["PIPELINE_SIZES"]
    if not isinstance(sizes, (list, tuple)) or not 1 <= len(sizes) <= 8:
        raise SpecError(f"PIPELINE_SIZES must be a list of 1 to 8 pipeline sizes, e.g. [1, 2, 4] ([1]: no pipelines), "
                        f"got {sizes!r}")
    if p["SPECULATIVE"] is not None:
        preset_param("SPECULATIVE", "speculative", p["SPECULATIVE"])
    others = p["OTHER_GPUS"]
    if not isinstance(others, (list, tuple)) or len(others) > 3 or not all(isinstance(g, str) for g in others):
        raise SpecError(f"OTHER_GPUS must be a list of at most 3 more hardware presets searched beside GPU ([]: GPU "
                        f"alone), got {others!r}")
    for g in others:
        preset_param("OTHER_GPUS", "hardware", g)
    preset_param("PRICE_TIER", "prices", p["PRICE_TIER"])
    preset_param("MIX_GPU", "hardware", p["MIX_GPU"])
    if p["INTERACTIVITY"] is not None:
        import math as _m

        v = p["INTERACTIVITY"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (_m.isfinite(v) and 0 < v <= 1e6):
            raise SpecError(f"INTERACTIVITY must be None (the TPOT target's) or tokens/s per user in (0, 1e6], "
                            f"got {v!r}")
    int_param("TOP", p["TOP"], 1, 1000)
    int_param("N_RATES", p["N_RATES"], 2, 64)
    int_param("SIMULATED_REQUESTS", p["SIMULATED_REQUESTS"], 10, 100_000)
    rename = {"gpus": "GPUS", "isl": "ISL", "osl": "OSL", "ttft_ms": "TTFT_MS", "tpot_ms": "TPOT_MS",
              "stat": "STAT", "rate_per_s": "RATE", "weight_dtype": "WEIGHT_DTYPES", "kv_dtype": "KV_DTYPES",
              "weight_dtypes": "WEIGHT_DTYPES", "kv_dtypes": "KV_DTYPES", "pipeline_sizes": "PIPELINE_SIZES",
              "speculative_accepted_length": "SPECULATIVE_ACCEPTED_LENGTH", "speculative": "SPECULATIVE",
              "objective": "OBJECTIVE", "budget_usd_per_hour": "BUDGET_USD_PER_HOUR", "price_tier": "PRICE_TIER",
              "other_gpus": "OTHER_GPUS"}
    built("MODEL, GPU", lambda: plan.Question(
        model=p["MODEL"], gpu=p["GPU"], gpus=p["GPUS"], isl=p["ISL"], osl=p["OSL"], ttft_ms=p["TTFT_MS"],
        tpot_ms=p["TPOT_MS"], stat=p["STAT"], rate_per_s=p["RATE"], runtime=p["RUNTIME"],
        weight_dtypes=None if p["WEIGHT_DTYPES"] is None else tuple(p["WEIGHT_DTYPES"]),
        kv_dtypes=None if p["KV_DTYPES"] is None else tuple(p["KV_DTYPES"]), link=p["LINK"],
        pipeline_sizes=tuple(p["PIPELINE_SIZES"]), speculative=p["SPECULATIVE"],
        speculative_accepted_length=p["SPECULATIVE_ACCEPTED_LENGTH"], other_gpus=tuple(p["OTHER_GPUS"]),
        objective=p["OBJECTIVE"], price_tier=p["PRICE_TIER"], budget_usd_per_hour=p["BUDGET_USD_PER_HOUR"]),
        rename=rename)
    return {}

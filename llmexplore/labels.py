"""How the workbook's names read in legends, titles and sentences: one vocabulary for the sweeps that build
tables, the findings that state them and the plots that draw them (layer 0: no numbers, no imports)."""

from __future__ import annotations

__all__ = ["ENGINE_LABELS", "KIND_LABELS", "runtime_label", "table_decoding"]

#: serving engines (and ``any``: the three engines' kernel rows pooled)
ENGINE_LABELS = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang", "any": "engine-neutral"}
#: kinds of end-to-end validation rows (data/validation/e2e.csv)
KIND_LABELS = {"decode": "decode", "decode_loaded": "decode under load", "prefill": "prefill"}
_RUNTIME_LABELS = {"engine": "engine presets", "default": "engine-neutral curves (default)",
                   "scalar": "scalar, pre-curve"}


def runtime_label(choice: str) -> str:
    """How a runtime choice of notebook 05 (``engine``, ``default``, ``scalar`` or a preset name) reads."""
    return _RUNTIME_LABELS.get(choice, f"runtime {choice}")


def table_decoding(table) -> str:
    """How a sweep table's rows decode: its ``decoding`` column ('' for plain decoding, 'PP2', or a speculative
    preset with its accepted length), '' for a table without the column (llmexplore.models.step.per_token)."""
    return str(table["decoding"].iloc[0]) if "decoding" in table.columns and len(table) else ""

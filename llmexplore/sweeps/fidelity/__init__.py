"""Model fidelity tables: the model against measurements, end to end and kernel by kernel (notebooks/05_fidelity).

Built once and read by the figures, the tables for people and the sentences:

- :func:`accuracy_table`: every end-to-end validation row (``data/validation/e2e.csv``, never fitted) and every
  in-sample calibration point (``data/calibration/aic-llama31-70b-tp8-h100.csv``, which the runtime presets were
  fitted to) predicted under each runtime choice: ``engine`` (each row priced by its engine's preset, as
  :func:`llmexplore.validate.evaluate` does), ``default`` (the engine-neutral kernel curves) and ``scalar`` (the
  pre-curve model with one efficiency per kernel class).
- :func:`accuracy_summary`, :func:`category_errors`, :func:`not_modelled` and :func:`ranking_pairs` read it.
- :func:`kernel_data` loads the kernel rows of one GPU and engine (:func:`llmexplore.kernelfit.load_rows`) and
  prices each with the curve the step engine uses (:func:`llmexplore.kernelfit.predict_rows`);
  :func:`gemm_curves`, :func:`moe_curves`, :func:`decode_attention_curves` and :func:`allreduce_curves` turn it
  into measured points and fitted lines for plotting.
- :func:`curve_catalog` and :func:`rejected_curves` list every curve of ``data/kernel_efficiency.yaml`` with its
  kernel-level fit error, and the curves rejected with the reason.

- :mod:`.e2e`: the serving simulator against real engines' measured TTFT and TPOT under closed-loop benchmarks
  (``data/validation/serving_e2e.csv``; ``llmexplore validate --e2e``).

The package: :mod:`.accuracy` (end to end, step by step), :mod:`.e2e` (serving end to end) and :mod:`.curves`
(kernel by kernel); what is imported here is its public API.
"""

from . import e2e
from .accuracy import (CALIBRATION_CSV, CALIBRATION_ENGINE, RUNTIMES, accuracy_summary, accuracy_table,
                       category_errors, check_runtime_choice, not_modelled, ranking_pairs, runtime_choices,
                       sampler_effect)
from .curves import (ENGINES, SIZE_CLASSES, CurveTables, KernelData, allreduce_curves, curve_catalog,
                     curve_errors, decode_attention_curves, deepep_ll_curves, fit_error_pivot, gemm_curves,
                     kernel_data, moe_curves, rejected_curves)

__all__ = ["RUNTIMES", "CALIBRATION_CSV", "CALIBRATION_ENGINE", "ENGINES",
           "SIZE_CLASSES", "runtime_choices", "accuracy_table", "accuracy_summary",
           "sampler_effect", "category_errors", "not_modelled", "ranking_pairs", "KernelData", "CurveTables",
           "kernel_data", "gemm_curves", "moe_curves", "decode_attention_curves", "allreduce_curves",
           "deepep_ll_curves", "curve_errors", "curve_catalog", "rejected_curves", "fit_error_pivot",
           "check_runtime_choice", "e2e"]

#!/usr/bin/env python3
"""Write data/validation/serving_e2e.csv: the rows of AIConfigurator's measured end-to-end sample whose model and
GPU have presets here (issue 19 §2). Never fitted: `llmexplore validate --e2e` checks the serving simulator on them.

Source: ai-dynamo/aiconfigurator (Apache-2.0, NVIDIA), file aic-core/src/aiconfigurator_core/systems/silicon_sample.csv
at commit 095f58a51c4ca8e61b66ec108d86f223f8d559ce (2026-08-21; the file last changed in 0b077da5e017). Its
5,221 rows are "real e2e measurements with provenance; a 2026-04 dump of the internal benchmark DB"
(docs/design/prediction_regression_gate_design.md §2.5 at that commit): one closed-loop benchmark per row
(silicon_concurrency clients, fixed ISL/OSL), with its engine, version, container image, parallelism per side
and the measured TTFT and TPOT in ms.

    git -C <aiconfigurator clone> show 095f58a5:aic-core/src/aiconfigurator_core/systems/silicon_sample.csv > s.csv
    python data/validation/extract_aic_silicon.py s.csv

Rows are kept verbatim (every column, in the source's order), filtered to MODELS x SYSTEMS; deterministic.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "serving_e2e.csv"
#: the checkpoints whose architecture a preset here describes (llmexplore/sweeps/fidelity/e2e.py maps them)
MODELS = ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3", "nvidia/DeepSeek-R1-NVFP4", "meta-llama/Llama-3.1-70B",
          "meta-llama/Llama-3.1-8B-Instruct", "nvidia/Llama-3.1-8B-Instruct-FP8", "Qwen/Qwen3-32B",
          "nvidia/Qwen3-32B-NVFP4")
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "gb200")
SOURCE_SHA256 = "4240bfaf555b6f8b2c62512074e5efbb7791cdbb0344b068408f397588499adb"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="silicon_sample.csv at the commit above")
    args = ap.parse_args()
    raw = args.source.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SOURCE_SHA256:
        raise SystemExit(f"{args.source}: sha256 {digest}, not the file at 095f58a5 ({SOURCE_SHA256})")
    rows = list(csv.DictReader(raw.decode("utf-8").splitlines()))
    keep = [r for r in rows if r["model_path"] in MODELS and r["system"] in SYSTEMS]
    with open(OUT, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(keep)
    print(f"{OUT.name}: {len(keep)} of {len(rows)} rows")


if __name__ == "__main__":
    main()

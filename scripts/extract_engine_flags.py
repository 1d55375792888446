"""Check data/engines.yaml against the engines' own argument-parser source.

Unpack the releases named in data/engines.yaml (the wheels from PyPI, e.g.
``pip download --no-deps --only-binary :all: --python-version 3.12 --platform manylinux_2_28_x86_64 vllm==0.33.0``
then ``unzip vllm-*.whl -d vllm-src``; the same for sglang) and run::

    python scripts/extract_engine_flags.py --vllm vllm-src --sglang sglang-src

It reads the option strings each engine registers, from the source text only (nothing is imported or run):

* vLLM: every string literal starting with ``--`` passed to an ``add_argument(...)`` call in the files the
  YAML cites (``vllm/engine/arg_utils.py``); a ``--no-X`` flag the YAML marks ``derived_from`` ``--X`` is
  accepted when ``--X`` is registered there (argparse.BooleanOptionalAction registers both).
* SGLang: every annotated field of the classes in the cited ``sglang/srt/arg_groups/fields/*.py`` whose
  ``A[...]`` metadata is a help string or an ``Arg(...)`` without ``no_cli=True`` becomes
  ``--field-name`` (or its ``cli_name``) plus its ``aliases``, which is what ``add_cli_args_from_dataclass``
  (``sglang/srt/arg_groups/arg_utils.py``) registers; plus literal ``add_argument`` strings in
  ``sglang/srt/server_args.py``.

* TensorRT-LLM (no wheel on PyPI, only a source stub pointing to pypi.nvidia.com: check out the commit the
  YAML names, ``git clone https://github.com/NVIDIA/TensorRT-LLM && git -C TensorRT-LLM checkout 00209af149``,
  and pass ``--trtllm TensorRT-LLM``): every string literal starting with ``--`` passed to a
  ``click.option(...)`` call in the cited ``tensorrt_llm/commands/serve.py``.

It prints each recorded flag with the file and line that registers it, and exits 1 if a recorded flag is not
registered in the file the YAML cites. (The choice values under `choices` are checked by hand against the
files named in `sources`.)
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _add_argument_flags(path: Path) -> dict[str, int]:
    """Option strings of every ``*.add_argument("--x", ...)`` call in a file -> line."""
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--"):
                    out.setdefault(a.value, node.lineno)
    return out


def _click_option_flags(path: Path) -> dict[str, int]:
    """Option strings of every ``click.option("--x", "--y", ...)`` call (a decorator) in a file -> line."""
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "option"
                and getattr(node.func.value, "id", None) == "click"):
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--"):
                    out.setdefault(a.value, node.lineno)
    return out


def _dataclass_flags(path: Path) -> dict[str, int]:
    """CLI names of the ``A[T, "help"]`` / ``A[T, Arg(...)]`` fields of every class in a file -> line."""
    out: dict[str, int] = {}
    for cls in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(cls, ast.ClassDef):
            continue
        for stmt in cls.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            ann = stmt.annotation
            if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", None) in ("A", "Annotated")):
                continue
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            meta = elts[1:]
            names = ["--" + stmt.target.id.replace("_", "-")]
            cli = True
            has_meta = False
            for m in meta:
                if isinstance(m, ast.Constant) and isinstance(m.value, str) or isinstance(m, (ast.JoinedStr, ast.BinOp)):
                    has_meta = True
                elif isinstance(m, ast.Call) and getattr(m.func, "id", None) == "Arg":
                    has_meta = True
                    for kw in m.keywords:
                        if kw.arg == "no_cli" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                            cli = False
                        elif kw.arg == "cli_name" and isinstance(kw.value, ast.Constant):
                            names[0] = kw.value.value
                        elif kw.arg == "aliases" and isinstance(kw.value, ast.List):
                            names += [e.value for e in kw.value.elts if isinstance(e, ast.Constant)]
            if has_meta and cli:
                for n in names:
                    out.setdefault(n, stmt.lineno)
    return out


def registered(engine: str, src: Path, files: set[str]) -> dict[str, tuple[str, int]]:
    """flag -> (file, line) for the cited files of one engine."""
    out: dict[str, tuple[str, int]] = {}
    for rel in sorted(files):
        path = src / rel
        flags = _click_option_flags(path) if engine == "trtllm" else _add_argument_flags(path)
        if engine == "sglang" and "/arg_groups/fields/" in rel:
            flags.update(_dataclass_flags(path))
        for f, line in flags.items():
            out.setdefault(f, (rel, line))
    return out


def check(engine: str, entry: dict, src: Path) -> list[str]:
    files = {v["file"] for v in entry["flags"].values()}
    found = registered(engine, src, files)
    problems = []
    by_flag = {v["flag"]: v for v in entry["flags"].values()}
    for flag in entry["recorded_flags"]:
        spec = by_flag.get(flag)
        if spec is None:
            problems.append(f"{engine}: recorded flag {flag} has no entry under flags")
            continue
        probe = spec.get("derived_from", flag)
        if probe in found and found[probe][0] == spec["file"]:
            rel, line = found[probe]
            print(f"{engine:7s} {flag:40s} {rel}:{line}" + (f" (from {probe})" if probe != flag else ""))
        else:
            problems.append(f"{engine}: {flag} is not registered in {spec['file']}")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm", type=Path, help="unpacked vLLM release (the directory holding vllm/)")
    ap.add_argument("--sglang", type=Path, help="unpacked SGLang release (the directory holding sglang/)")
    ap.add_argument("--trtllm", type=Path, help="TensorRT-LLM source at the YAML's commit (holding tensorrt_llm/)")
    ap.add_argument("--yaml", type=Path, default=ROOT / "data" / "engines.yaml")
    args = ap.parse_args(argv)
    table = yaml.safe_load(args.yaml.read_text(encoding="utf-8"))
    problems = []
    for engine in ("vllm", "sglang", "trtllm"):
        src = getattr(args, engine)
        if src is not None:
            problems += check(engine, table["engines"][engine], src)
    for p in problems:
        print("MISSING:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

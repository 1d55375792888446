"""The README is honest: every `.venv/bin/llmexplore ...` example in it runs as written, in-process through
``llmexplore.cli.main``, and exits 0; so does every ``make report ARGS="..."`` example.

The examples run in a scratch directory that links the repository's ``data/`` (so relative paths work and
outputs such as ``my-cal.yaml`` or ``reports/`` stay out of the checkout). ``report`` examples check their
parameters and export real reports, but notebook execution is stubbed here (papermill's parameter injection
without a kernel): the notebook tests execute the notebooks with the same parameters for real, and this test
must stay fast.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from llmexplore import cli, report

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, re.S)


def llmexplore_examples() -> list[list[str]]:
    """argv (after the program name) of every `.venv/bin/llmexplore` line in the README's shell blocks."""
    out = []
    for block in _shell_blocks(README):
        for line in block.splitlines():
            line = line.strip()
            if line.startswith(".venv/bin/llmexplore "):
                out.append(shlex.split(line, comments=True)[1:])
    return out


def make_report_examples() -> list[list[str]]:
    """The ARGS of every `make report ARGS="..."` example, in code blocks and in the text."""
    return [shlex.split(args) for args in re.findall(r'make report ARGS="([^"]*)"', README)]


EXAMPLES = llmexplore_examples()
MAKE_REPORT = make_report_examples()


def test_the_readme_has_examples():
    commands = {argv[0] for argv in EXAMPLES}
    assert {"presets", "layouts", "pd", "prefill", "moe", "transfer", "offload", "calibrate", "calibrate-disk",
            "report"} <= commands
    assert MAKE_REPORT, "the README shows how to pass parameters to make report"


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    (tmp_path / "data").symlink_to(ROOT / "data", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def no_kernel(monkeypatch):
    """Execute notebooks without a kernel: inject the parameters as papermill would, record nothing."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    seen = []

    def execute(src, dst, params, timeout_s):
        nb = parameterize_notebook(load_notebook_node(str(src)), params, kernel_name="python3", language="python")
        nbformat.write(nb, str(dst))
        seen.append((Path(src).stem, dict(params)))

    monkeypatch.setattr(report, "execute_notebook", execute)
    return seen


@pytest.mark.parametrize("argv", EXAMPLES, ids=[" ".join(a)[:60] for a in EXAMPLES])
def test_readme_example_runs_as_written(argv, scratch, no_kernel, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, f"`llmexplore {shlex.join(argv)}` exited {code}: {err.strip()}"
    if argv[0] == "report":
        out_dir = Path(argv[argv.index("--out") + 1]) if "--out" in argv else Path("reports")
        assert (scratch / out_dir / "index.html").is_file()
        assert no_kernel, "the report example ran no notebook"


@pytest.mark.parametrize("args", MAKE_REPORT, ids=[" ".join(a) for a in MAKE_REPORT])
def test_make_report_examples_run(args, scratch, no_kernel, capsys):
    code = cli.main(["report", *args])
    _, err = capsys.readouterr()
    assert code == 0, f"make report ARGS=\"{shlex.join(args)}\" exited {code}: {err.strip()}"
    if args[:2] == ["-p", "MODEL"]:  # the README promises: skipped where it does not apply, with a note
        notebooks = dict(no_kernel)
        assert "MODEL" not in notebooks["30_moe_expert_parallel"]
        assert "note: -p MODEL" in err and "skipped here" in err
        index = (scratch / "reports" / "index.html").read_text()
        assert "skipped here" in index


# ---- the README's sizes (issue 20 §1.12: "2,304 tests" and "six notebooks" stayed while the suite grew) ------
def _sizes_table() -> dict[str, str]:
    block = README[README.index("<!-- sizes:"):]
    rows = re.findall(r"^\| (.+?) \| (.+?) \| (.+?) \|$", block[:block.index("\n\n", block.index("| what"))], re.M)
    return {what.strip("` "): size for what, size, _ in rows[1:]}  # after the header row


def _about(text: str) -> int:
    return int(re.search(r"([\d,]+)", text).group(1).replace(",", ""))


def test_the_readme_states_its_sizes_in_one_table():
    sizes = _sizes_table()
    assert set(sizes) == {"make report", "make test", "fast inner loop (below)"}
    assert _about(sizes["make report"]) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    others = re.sub(r"<!-- sizes:.*?\n\n.*?\n\n", "", README, flags=re.S)
    assert not re.search(r"\b[\d,]{3,} tests\b", others), "test counts belong in the sizes table only"


@pytest.mark.slow  # collects the whole suite in a subprocess (about 20 s)
@pytest.mark.parametrize("row, markers", [("make test", ""),
                                          ("fast inner loop (below)", "not notebooks and not browser and not slow")])
def test_the_readme_test_counts_are_within_a_tenth(row, markers):
    import subprocess
    import sys

    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(ROOT / "tests")]
    if markers:
        argv += ["-m", markers]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=600).stdout
    m = re.search(r"(\d+)(?:/\d+)? tests? (?:collected|selected)", out)
    assert m, out[-500:]
    collected, stated = int(m.group(1)), _about(_sizes_table()[row])
    assert abs(collected - stated) <= 0.1 * collected, f"README says about {stated:,} for {row}; {collected:,} now"

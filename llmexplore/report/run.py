"""Running a notebook headless, and saying in one line where and why it failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["execute_notebook", "describe_failure"]


def execute_notebook(src: Path, dst: Path, params: dict[str, Any], timeout_s: float) -> None:
    """Execute ``src`` into ``dst`` headless (engine ``llmexplore``, kernel python3, cwd = its folder).

    The one place the workbook runs a notebook: the reports and the notebook tests share it. papermill's
    own log lines (a timeout is also logged, with the kernel's shutdown noise) are silenced: failures come
    back as exceptions, described in one line by :func:`describe_failure`.
    """
    import logging

    import papermill as pm

    log = logging.getLogger("papermill")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        pm.execute_notebook(
            str(src), str(dst),
            parameters=params,
            engine_name="llmexplore",
            kernel_name="python3",
            execution_timeout=timeout_s,
            start_timeout=60,
            cwd=str(src.parent),
            progress_bar=False,
            log_output=False,
            extra_arguments=["--IPKernelApp.log_level=ERROR"],
        )
    finally:
        log.setLevel(level)



def _source_cell(executed: Path | None, index: int | None) -> tuple[int | None, str]:
    """(index in the source notebook, first line) of cell ``index`` of an executed notebook; with ``index``
    None, of the cell that was running or failed last (papermill's metadata)."""
    import nbformat

    try:
        nb = nbformat.read(str(executed), as_version=4)
    except Exception:  # noqa: BLE001 - no executed copy: say what we know
        return index, ""
    # papermill marks a failure with cells of its own (tagged); its cell_index counts the notebook without them
    cells = [c for c in nb.cells if "papermill-error-cell-tag" not in c.metadata.get("tags", [])]
    if index is None:
        started = [i for i, c in enumerate(cells) if c.cell_type == "code"
                   and (c.metadata.get("papermill", {}).get("start_time") or c.get("outputs"))]
        failed = [i for i in started if any(o.get("output_type") == "error" for o in cells[i].get("outputs", []))]
        index = (failed or started or [None])[-1]
        if index is None:
            return None, ""
    injected = [i for i, c in enumerate(cells) if "injected-parameters" in c.metadata.get("tags", [])]
    first = next((line.strip() for line in cells[index].source.splitlines() if line.strip()), "")
    return index - sum(1 for i in injected if i < index), first



def describe_failure(exc: BaseException, executed: Path | None = None, timeout_s: float | None = None) -> str:
    """One line: which cell (index in the source notebook and its first line) failed, and how."""
    from nbclient.exceptions import CellTimeoutError
    from papermill.exceptions import PapermillExecutionError

    def where(index, first):
        text = f"cell {index}" if index is not None else "a cell"
        return text + (f" (`{first[:80]}`)" if first else "")

    if isinstance(exc, PapermillExecutionError):
        index, first = _source_cell(executed, exc.cell_index) if executed else (exc.cell_index, "")
        first = first or next((ln.strip() for ln in (exc.source or "").splitlines() if ln.strip()), "")
        evalue = (str(exc.evalue).strip().splitlines() or [""])[0]
        return f"{where(index, first)}: {exc.ename}: {evalue}"
    if isinstance(exc, (CellTimeoutError, TimeoutError)):
        index, first = _source_cell(executed, None)
        after = f" after {timeout_s:g} s" if timeout_s else ""
        return f"{where(index, first)} timed out{after} (raise it with --timeout)"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


_describe_failure = describe_failure  # the name earlier versions used

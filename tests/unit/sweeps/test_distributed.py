"""llmexplore.sweeps.distributed: the same rows in this process, in a local process pool and on a Dask
LocalCluster; Parquet parts written atomically; resume runs only the missing tasks; failing tasks are rows.

The task function is ``_demo_task`` from the package (importable by pool and Dask worker processes); calls
are counted with one marker file per call, so nothing here depends on timing.
"""

from __future__ import annotations

import os

import pandas as pd
import pytest

from llmexplore.errors import SpecError, UsageError
from llmexplore.sweeps import distributed as dist
from llmexplore.sweeps.distributed import _demo_task, run_sweep

pytestmark = pytest.mark.slow  # process pools and a Dask cluster: the fast tier (-m 'not slow') leaves it out

N = 24


def _tasks(n=N, fail=(5,), **extra):
    return [{"task_id": f"t{i:03d}", "i": i, "rows": 1 + i % 3, "fail": i in fail, **extra} for i in range(n)]


def _calls(path) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in os.listdir(path):
        tid = name.split("-")[0]
        out[tid] = out.get(tid, 0) + 1
    return out


def _dask():
    """dask.distributed (the dev extra installs it); skipped without it, except under CI."""
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        import distributed

        return distributed
    return pytest.importorskip("distributed", reason="pip install -e '.[dask]'")


@pytest.fixture(scope="module")
def reference():
    return run_sweep(_demo_task, _tasks(), workers=1)


def test_rows_are_sorted_by_task_then_row_and_errors_are_rows(reference):
    ok = reference[reference["error"] == ""]
    assert list(reference.columns) == ["task_id", "i", "r", "value", "label", "even", "spin_acc", "error"]
    assert len(ok) == sum(1 + i % 3 for i in range(N) if i != 5)
    assert list(reference["task_id"]) == sorted(reference["task_id"])
    assert list(ok[ok["task_id"] == "t002"]["r"]) == [0, 1, 2]
    bad = reference[reference["error"] != ""]
    assert list(bad["task_id"]) == ["t005"]
    assert bad["error"].item() == "ValueError: task 5 failed on purpose"  # one line
    assert bad["value"].isna().all()


def test_local_pool_and_dask_local_cluster_give_the_same_frame(reference, tmp_path):
    distributed = _dask()
    pooled = run_sweep(_demo_task, _tasks(), workers=2, chunk=3)
    pd.testing.assert_frame_equal(pooled, reference)
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as lc:
        on_cluster = run_sweep(_demo_task, _tasks(), scheduler=lc, chunk=3, out=tmp_path / "by-cluster")
        with distributed.Client(lc) as client:  # a Client, and the scheduler's address, work too
            by_client = run_sweep(_demo_task, _tasks(), scheduler=client, chunk=5)
        by_address = run_sweep(_demo_task, _tasks(), scheduler=lc.scheduler_address, chunk=24)
    pd.testing.assert_frame_equal(on_cluster, reference)
    pd.testing.assert_frame_equal(by_client, reference)
    pd.testing.assert_frame_equal(by_address, reference)
    assert len(list((tmp_path / "by-cluster").glob("part-*.parquet"))) == 8  # one part per batch of 3


def test_parts_are_whole_files_one_per_batch_and_temporaries_are_ignored(reference, tmp_path):
    (tmp_path / ".part-00000000000000000001-deadbeef.parquet.tmp").write_bytes(b"a write cut short")
    frame = run_sweep(_demo_task, _tasks(), out=tmp_path, workers=1, chunk=5)
    pd.testing.assert_frame_equal(frame, reference)
    parts = sorted(tmp_path.glob("part-*.parquet"))
    assert len(parts) == 5  # 24 tasks in batches of 5
    assert sum(len(pd.read_parquet(p)) for p in parts) == len(reference)
    pd.testing.assert_frame_equal(dist.read_parts(tmp_path), reference)


def test_resume_runs_only_the_missing_tasks(reference, tmp_path):
    out, calls = tmp_path / "out", tmp_path / "calls"
    calls.mkdir()
    tasks = _tasks(calls=str(calls))
    half = run_sweep(_demo_task, tasks[: N // 2], out=out, workers=1, chunk=4)
    assert len(half["task_id"].unique()) == N // 2 and sum(_calls(calls).values()) == N // 2
    full = run_sweep(_demo_task, tasks, out=out, workers=2, chunk=4)  # the rest, in a pool this time
    assert _calls(calls) == {f"t{i:03d}": 1 for i in range(N)}  # every task ran exactly once
    pd.testing.assert_frame_equal(full, reference)
    again = run_sweep(_demo_task, tasks, out=out, workers=2)
    assert sum(_calls(calls).values()) == N  # nothing left to run
    pd.testing.assert_frame_equal(again, reference)


def test_an_interrupted_sweep_resumes_where_it_stopped(reference, tmp_path):
    out, calls = tmp_path / "out", tmp_path / "calls"
    calls.mkdir()
    tasks = _tasks(calls=str(calls))
    tasks[10]["interrupt_once"] = str(tmp_path / "interrupted")  # like Ctrl-C during the third batch
    with pytest.raises(KeyboardInterrupt):
        run_sweep(_demo_task, tasks, out=out, workers=1, chunk=4)
    assert len(list(out.glob("part-*.parquet"))) == 2 and not list(out.glob(".*.tmp"))
    assert set(dist.completed_tasks(out)) == {f"t{i:03d}" for i in range(8)}
    frame = run_sweep(_demo_task, tasks, out=out, workers=1, chunk=4)
    pd.testing.assert_frame_equal(frame, reference)
    counts = _calls(calls)
    assert all(counts[f"t{i:03d}"] == 1 for i in range(8))  # the two saved batches did not run again
    assert all(counts[f"t{i:03d}"] == 2 for i in range(8, 11))  # the cut batch's started tasks ran twice


def test_errors_are_kept_on_resume_unless_retried(tmp_path):
    run_sweep(_demo_task, _tasks(4, fail=(1,)), out=tmp_path, workers=1)
    fixed = _tasks(4, fail=())  # same task ids, the bug fixed
    kept = run_sweep(_demo_task, fixed, out=tmp_path, workers=1)
    assert list(kept.loc[kept["error"] != "", "task_id"]) == ["t001"]
    retried = run_sweep(_demo_task, fixed, out=tmp_path, workers=1, retry_errors=True)
    assert (retried["error"] == "").all()
    pd.testing.assert_frame_equal(retried, run_sweep(_demo_task, fixed, workers=1))
    rerun = run_sweep(_demo_task, _tasks(4, fail=(2,)), out=tmp_path, workers=1, resume=False)  # newest parts win
    assert list(rerun.loc[rerun["error"] != "", "task_id"]) == ["t002"]


def test_a_crashed_worker_process_makes_error_rows_not_a_crashed_sweep(tmp_path):
    tasks = _tasks(8, fail=())
    tasks[3]["exit"] = True  # the worker process dies: the pool breaks
    frame = run_sweep(_demo_task, tasks, out=tmp_path, workers=2, chunk=2)
    assert set(frame["task_id"]) == {t["task_id"] for t in tasks}
    lost = frame.loc[frame["error"] != "", "error"]
    assert "t003" in set(frame.loc[lost.index, "task_id"])
    assert lost.str.startswith("batch failed: BrokenProcessPool").all()
    del tasks[3]["exit"]
    retried = run_sweep(_demo_task, tasks, out=tmp_path, workers=2, chunk=2, retry_errors=True)
    pd.testing.assert_frame_equal(retried, run_sweep(_demo_task, tasks, workers=1))


def test_task_ids_are_stable_hashes_unless_given():
    a = {"model": "llama-3-70b", "gpu": "h100-sxm", "gpus": 8, "batch": [1, 64]}
    assert dist.task_id(a) == dist.task_id(dict(reversed(list(a.items()))))  # key order does not matter
    assert dist.task_id(a) != dist.task_id({**a, "gpus": 16})
    assert dist.task_id(a) == "4e2df5fa8a378a70"  # the same on every machine and run
    assert dist.task_id({**a, "task_id": 7}) == "7"
    with pytest.raises(SpecError, match="plain values"):
        dist.task_id({"x": object()})
    with pytest.raises(SpecError, match="unique"):
        run_sweep(_demo_task, [{"i": 1}, {"i": 1}], workers=1)
    with pytest.raises(UsageError):
        run_sweep(_demo_task, [[1, 2]], workers=1)
    frame = run_sweep(_demo_task, [{"i": 1, "rows": 0}, {"i": 2, "rows": 1}], workers=1)
    assert list(frame["i"]) == [2]  # a task without rows has none


def _nested_rows(task):
    return [{"x": [1, 2]}] if task["i"] else [{"x": 1}]


def test_rows_must_be_flat_scalars():
    frame = run_sweep(_nested_rows, [{"task_id": "a", "i": 0}, {"task_id": "b", "i": 1}], workers=1)
    assert frame["error"].tolist() == ["", ("TypeError: row values must be plain scalars (str, int, float, bool, "
                                            "None), got list")]


def test_a_planning_question_is_a_task():
    q = {"model": "llama-3-8b", "gpu": "h100-sxm", "gpus": 2, "batch": [1, 32], "context": [1024, 8192]}
    frame = run_sweep(dist.layout_question, [q], workers=1)
    assert len(frame) == 2 * 2 * 4 and (frame["error"] == "").all()
    assert {"model", "gpu", "gpus", "batch", "context", "layout", "step_ms", "feasible"} <= set(frame.columns)
    assert frame["task_id"].nunique() == 1

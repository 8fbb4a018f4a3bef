"""`harness batch`: many task-runs on a Dask cluster (a local one on 127.0.0.1 by default).

`tasks` (the tasks file, validated with the file, line and field of any error), `records` (the
batch directory, the source of truth: one record per task-run, written atomically), `worker` (one
task-run in a Dask worker process, through the composition root), `runner` (the client: plan,
submit, collect, resume, the global budget).
"""

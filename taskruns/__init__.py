"""Task runs: the worker's long jobs, their kinds, runs, chunks, claims, heartbeats and
reconciliation, in one room and one Django app (API.md tasks).

The modules, leaf first; each imports only those above it, never the other way, and no
function-local import closes a circle (``tests/taskruns/test_imports.py`` walks them):

- ``models``: ``TaskRun``, ``TaskChunk`` and ``WorkerHeartbeat``, on the tables they had as
  ``feedback`` models.
- ``enqueue``: the door code outside this room uses to queue a task. It publishes by registered
  task name and imports no task module and no service, so any service may call it.
- ``heartbeat``: a running run's or chunk's heartbeat and progress, each worker's own beat.
- ``claims``: the compare-and-swap that gives a run or a chunk to one worker.
- ``kinds``: the one registry of task kinds: who may start each, its params, the service that
  runs it, and for the fanned-out kinds what a chunk walks and how results merge. The services
  themselves stay in their own rooms (``feedback.sweep``, ``feedback.rebuild``,
  ``feedback.snapshots``, ``feedback.simulations``, ``feedback.suite``, ``rms.verification``).
- ``chunks``: fan-out of a run into key-range chunks, a chunk's execution and its reconciler.
- ``runs``: starting a run, running a single-task kind, finishing, the reconciler.
- ``selectors``: the task-run gauges /metrics reads.
- ``tasks``: the Celery tasks, thin; their registered names are kept from before this package
  (``feedback.tasks.*``) so queued messages and beat entries still find them.
- ``apps``: the app config, which registers the tasks, /health's worker liveness and the gauges.
"""

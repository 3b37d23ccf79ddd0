"""RQ task functions: a task takes a job id and has it run (worker.execute), in the worker's
job process when there is one (worker.runner).

Privacy-critical order (worker.execute): the ledger `commit` entry and the queued -> running
transition are committed in one transaction BEFORE any noise is drawn, and the transition is a
compare-and-set, so a job can draw noise at most once: a retried or duplicated RQ job finds it
no longer queued (app.jobs.lifecycle.JobRun.start).
"""

from __future__ import annotations

from worker import runner
from worker.execute import run_job_here


def run_clustering_job(job_id: str) -> str:
    """The RQ entry point. Returns the final status (RQ's result store is not relied upon).

    In `privclust worker` the job runs in the worker's job process (worker.runner); anywhere
    else (a plain RQ worker, a test) in this process."""
    job_runner = runner.current()
    if job_runner is not None:
        return job_runner.run(job_id)
    return run_job_here(job_id)

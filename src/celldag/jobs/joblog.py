"""Send a Snakemake job's logging and stderr to the rule's log file; say why a job failed in one line.

Snakemake shows a job's stderr on the console (and, with show-failed-logs, the log of a failed job:
the SLURM profile sets it, where a job's stderr never reaches the console). An ``InputError`` (bad
input; its message names the file and the field) is one line in both: its traceback would only
point into celldag. Anything else is a bug: one line on the console, the whole traceback in the log.
``CELLDAG_TRACEBACK=1`` logs the traceback of input errors too.

Before anything else a job checks where it runs (``celldag.jobs.envs.job_environment_problem``): the celldag
it imported must be the workflow's version and, under ``--sdm conda``, come from the job's own env; else
one line, and the job stops.

A retry cannot fix an input error, but Snakemake retries every failure of a rule alike (the profile's
``retries``, meant for jobs killed for memory or time). So a job that fails on an input error leaves
a marker next to its log: a key of its rule, input files and params, the resources it had, the error
line. A retry of it (same key; more memory or time, as ``per_attempt`` gives a retry) writes that
line to its log and exits at once: no work redone, no second line on the console. A later run with
the same resources is a new try, not a retry: it runs, and so shows the error again if it persists.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import sys
import time
import traceback
from pathlib import Path

import celldag
from celldag.errors import InputError
from celldag.jobs.envs import SDM_CONDA_VARIABLE, job_environment_problem
from celldag.provenance import peak_rss_mb

ATTEMPT_RESOURCES = ("mem_mb", "runtime")  # per_attempt in workflow/rules/common.smk: they grow on every retry
# the job's own stderr (Snakemake's console) and the log that stderr goes to instead
_console = _log = None

NOT_RETRIED = (
    "not retried: the previous try of this job failed on the same input "
    "(a retry only helps a job out of memory or time)"
)


# the last line of every job's log: its exact peak (VmHWM), which Snakemake's benchmark samples only every
# 30 s after the first 15 s (celldag.jobs.resources.measured reads it)
ENDED = "job ended: wall {wall:.1f} s, peak RSS {peak:.0f} MB"
ENDED_PATTERN = re.compile(r"job ended: wall ([0-9.]+) s, peak RSS ([0-9]+) MB")


def _log_end(started: float) -> None:
    print(ENDED.format(wall=time.perf_counter() - started, peak=peak_rss_mb()), file=sys.stderr, flush=True)


def start(log_path: str) -> None:
    """Log to ``log_path`` from now on; a job running several runs calls it again for each run's log."""
    global _console, _log
    first_run = _log is None
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    if _log is not None and sys.stderr is _log:  # the job's previous run logged there: back to the console
        _log.close()
        sys.stderr = _console
    console = _console = sys.stderr
    sys.stderr = _log = open(log_path, "a", buffering=1)  # noqa: SIM115 - open until the job's next run or its end
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    if first_run:
        where_it_runs(console)
    marker = InputErrorMarker.of_job(log_path)
    previous = marker.previous_error() if marker else None
    if previous:  # Snakemake's retry of a try that failed on an input error: it would fail alike
        print(f"{previous}\n{NOT_RETRIED}", file=sys.stderr)
        sys.exit(1)
    if first_run:  # a job that did work: its wall time and peak end its log
        atexit.register(_log_end, time.perf_counter())

    def report(kind, error, trace) -> None:
        if isinstance(error, InputError) and not os.environ.get("CELLDAG_TRACEBACK"):
            print(one_line(error), file=sys.stderr)
        else:
            traceback.print_exception(kind, error, trace, file=sys.stderr)
        print(one_line(error, log_path), file=console, flush=True)
        if marker and _fails_again(error):
            marker.record(one_line(error))

    sys.excepthook = report


def where_it_runs(console) -> None:
    """The job's celldag must be the workflow's, from the job's own env under --sdm conda
    (celldag.jobs.envs.job_environment_problem); else one line on the console and in the log, and the job stops.
    Under --sdm conda the log says which celldag and env the job runs with."""
    problem = job_environment_problem(celldag.__version__, celldag.__file__)
    if problem:
        for stream in (sys.stderr, console):
            print(f"error: {problem}", file=stream, flush=True)
        sys.exit(1)
    if os.environ.get(SDM_CONDA_VARIABLE) == "1":
        logging.getLogger("celldag.jobs.envs").info(
            "celldag %s from %s, env %s", celldag.__version__, Path(celldag.__file__).parent, os.environ["CONDA_PREFIX"]
        )


def one_line(error: BaseException, log_path: str | None = None) -> str:
    """``error: <message>`` for input errors; type, message and where the traceback is for the rest."""
    if isinstance(error, InputError):
        return f"error: {error}"
    where = f" (traceback in {log_path})" if log_path else ""
    return f"error: {type(error).__name__}: {error}{where}"


class InputErrorMarker:
    """``<log>.input-error``: what a job that failed on an input error was, and the error line."""

    def __init__(self, log_path: str, key: str, resources: dict) -> None:
        self.path = Path(f"{log_path}.input-error")
        self.key, self.resources = key, resources

    @classmethod
    def of_job(cls, log_path: str) -> InputErrorMarker | None:
        """The marker of the running Snakemake job; None outside one (no ``snakemake`` in ``__main__``)."""
        job = getattr(sys.modules.get("__main__"), "snakemake", None)
        if job is None:
            return None
        inputs = [(path, *_stat(path)) for path in job.input]
        key = repr([job.rule, inputs, list(job.params)])  # repr never fails; an unstable one only means no skip
        return cls(log_path, key, {name: job.resources.get(name) for name in ATTEMPT_RESOURCES})

    def previous_error(self) -> str | None:
        """The recorded error line when this job is a retry of the try that recorded it, else None."""
        try:
            recorded = json.loads(self.path.read_text())
        except (OSError, ValueError):  # no marker, or an unreadable one: run
            return None
        if recorded.get("key") == self.key and recorded.get("resources") != self.resources:
            return recorded["error"]
        self.path.unlink()  # a new try, or changed inputs: it runs and leaves a marker only if it fails again
        return None

    def record(self, error_line: str) -> None:
        self.path.write_text(json.dumps({"key": self.key, "resources": self.resources, "error": error_line}))


def _stat(path: str) -> tuple[int, int] | tuple[None, None]:
    try:
        stat = os.stat(path)
    except OSError:
        return None, None
    return stat.st_size, stat.st_mtime_ns


def _fails_again(error: BaseException) -> bool:
    """Input errors fail every try alike; downloads' do not (the network may recover: their rule retries)."""
    from celldag.jobs.download import DownloadError

    return isinstance(error, InputError) and not isinstance(error, DownloadError)

"""Send a Snakemake job's logging and stderr to the rule's log file; say why a job failed in one line.

Snakemake shows a job's stderr on the console, and (show-failed-logs) the log of a failed job. An
``InputError`` (bad input; its message names the file and the field) is one line in both: its
traceback would only point into celldag. Anything else is a bug: one line on the console, the whole
traceback in the log. ``CELLDAG_TRACEBACK=1`` logs the traceback of input errors too.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path

from celldag.errors import InputError


def start(log_path: str) -> None:
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    console = sys.stderr
    sys.stderr = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the job process
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )

    def report(kind, error, trace) -> None:
        if isinstance(error, InputError) and not os.environ.get("CELLDAG_TRACEBACK"):
            print(one_line(error), file=sys.stderr)
        else:
            traceback.print_exception(kind, error, trace, file=sys.stderr)
        print(one_line(error, log_path), file=console, flush=True)

    sys.excepthook = report


def one_line(error: BaseException, log_path: str | None = None) -> str:
    """``error: <message>`` for input errors; type, message and where the traceback is for the rest."""
    if isinstance(error, InputError):
        return f"error: {error}"
    where = f" (traceback in {log_path})" if log_path else ""
    return f"error: {type(error).__name__}: {error}{where}"

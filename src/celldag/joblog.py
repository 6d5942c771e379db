"""Send a Snakemake job's logging and stderr (tracebacks included) to the rule's log file."""

from __future__ import annotations

import logging
import sys
from pathlib import Path


def start(log_path: str) -> None:
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    sys.stderr = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the job process
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )

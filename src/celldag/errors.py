"""The one base class of the errors a user can fix: bad config, registry entry, dataset, file or download.

Jobs and the CLI print these as one line naming the file and field (``celldag.jobs.joblog``); anything else
is a bug and keeps its traceback, in the job's log.
"""


class InputError(ValueError):
    """Bad input, described in one line that names the file (or registry entry) and the field."""

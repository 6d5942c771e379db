"""Debian packages some tests need (slurm-wlm and munge, chromium): installed with apt-get when missing.

Installing needs root and apt-get; where either is missing, or the install fails, ``ensure_installed``
raises ``NotInstallable`` with the reason, so that the test skips saying why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

_SEARCH = ("/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin")


class NotInstallable(RuntimeError):
    """The packages are missing and cannot be installed here."""


def binary(name: str) -> str | None:
    """Full path of a program, also in the sbin folders a non-login PATH may lack."""
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SEARCH))


def ensure_installed(packages: Sequence[str], binaries: Sequence[str]) -> None:
    """Install ``packages`` with apt-get unless every one of ``binaries`` is already there."""
    if not sys.platform.startswith("linux"):
        raise NotInstallable(f"needs Linux, this is {sys.platform}")
    if all(binary(name) for name in binaries):
        return
    wanted = " ".join(packages)
    if os.geteuid() != 0:
        raise NotInstallable(f"{binaries[0]} is not installed and this is not root (cannot apt-get install {wanted})")
    if binary("apt-get") is None:
        raise NotInstallable(f"{binaries[0]} is not installed and there is no apt-get to install {wanted}")
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    install = [binary("apt-get"), "install", "-y", "-q", "--no-install-recommends", *packages]
    result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:  # empty package lists on a fresh image: update once, then retry
        subprocess.run([binary("apt-get"), "update", "-q"], env=env, capture_output=True, text=True, timeout=600)
        result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    missing = [name for name in binaries if binary(name) is None]
    if result.returncode != 0 or missing:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [f"still missing {missing}"]
        raise NotInstallable(f"apt-get install {wanted} failed: {tail[0]}")

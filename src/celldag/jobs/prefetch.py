"""What a config's run downloads, for ``celldag prefetch`` (docs/mirror.md): the plan's downloads with their sha256."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from celldag.jobs.download import DownloadError, expected_sha256
from celldag.plan import DOWNLOAD_PINS, source_files


@dataclass(frozen=True)
class Needed:
    """A URL a run downloads, with the sha256 its download checks (None: pinned on its first fetch, none yet)."""

    url: str
    sha256: str | None


def needed_files(plan, registries) -> list[Needed]:
    """Every URL ``plan`` downloads (``plan.downloads``), once each (entries may extract members of one archive),
    with the registry's sha256, else the pin of this working directory's first fetch
    (resources/<source>/checksums.json)."""
    digests: dict[str, set[str | None]] = {}
    for path in plan.downloads:
        source, name = Path(path).parts[-2:]  # plan.DOWNLOAD: resources/{source}/{file}
        entry = next(file for file in source_files(source, registries) if file["name"] == name and "url" in file)
        pinned = expected_sha256(entry, DOWNLOAD_PINS.format(source=source), name)
        digests.setdefault(entry["url"], set()).add(pinned.lower() if pinned else None)
    needed = []
    for url, found in sorted(digests.items()):
        known = sorted(found - {None})
        if len(known) > 1:
            raise DownloadError(f"{url}: its registry entries and pins disagree on its sha256 ({', '.join(known)})")
        needed.append(Needed(url, known[0] if known else None))
    return needed

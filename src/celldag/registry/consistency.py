"""The registries hold together: every entry point (a track's definition, a loader, a method's run, a
provider) exists without being imported, every id a track, method or dataset names is known, every source file is
pinned.
"""

from __future__ import annotations

from celldag.errors import InputError
from celldag.extensions import check_entry_point
from celldag.registry.files import ConfigError, Registries
from celldag.registry.params import CODE_FIELDS
from celldag.tracks import check_track


def check_consistency(registries: Registries) -> None:
    """Tracks, loaders, methods' run functions and providers exist; track ids and methods' needs are known."""
    for track_id, entry in registries.tracks.items():
        try:
            check_track(track_id, entry, registries.origin("tracks", track_id))
        except InputError as err:
            raise ConfigError(str(err)) from err
    known_tracks = ", ".join(sorted(registries.tracks))
    for kind, field_name in CODE_FIELDS.items():
        for entry_id, entry in getattr(registries, kind).items():
            where = f"{registries.origin(kind, entry_id)}: {entry_id}"
            try:
                check_entry_point(entry[field_name], f"{where}.{field_name}")
            except InputError as err:
                raise ConfigError(str(err)) from err
            if "track" in entry and entry["track"] not in registries.tracks:
                raise ConfigError(f"{where}.track: unknown track {entry['track']!r}; known: {known_tracks}")
    for dataset, entry in registries.datasets.items():
        if "stands_for" in entry:
            check_stand_in(dataset, entry, registries)
        for chained in entry["chained"]:
            where = f"{registries.origin('datasets', dataset)}: {dataset}.chained.{chained}"
            if chained not in registries.tracks:
                raise ConfigError(f"{where}: unknown track; known: {known_tracks}")
            if registries.track(chained).upstream != entry["track"]:
                raise ConfigError(
                    f"{where}: the {chained} track chains on {registries.track(chained).upstream or 'no track'}"
                    f", not on this dataset's track {entry['track']}"
                )
    for method, entry in registries.methods.items():
        methods_file = registries.origin("methods", method)
        if registries.track(entry["track"]).upstream and list(entry["variants"]) != ["default"]:
            raise ConfigError(
                f"{methods_file}: {method}.variants: a method of the chained track {entry['track']} has "
                "one variant, default (its runs are named by the run they chain on); make another "
                "method id for other params"
            )
        upstream_track = registries.track(entry["track"]).upstream
        if "upstreams" in entry:
            upstream_methods = sorted(m for m, e in registries.methods.items() if e["track"] == upstream_track)
            unknown = sorted(set(entry["upstreams"]) - set(upstream_methods)) if upstream_track else entry["upstreams"]
            if unknown:
                raise ConfigError(
                    f"{methods_file}: {method}.upstreams: {unknown[0]!r} is no method of the track "
                    f"{entry['track']} chains on"
                    + (
                        f" ({upstream_track}); known: {', '.join(upstream_methods)}"
                        if upstream_track
                        else " (none: it is no chained track)"
                    )
                )
        unknown = sorted(set(entry["kind_by_variant"]) - set(entry["variants"]))
        if unknown:
            raise ConfigError(f"{methods_file}: {method}.kind_by_variant: {method!r} has no variant {unknown[0]!r}")
        inputs = registries.track(entry["track"]).inputs
        for variant, needs in {None: entry["needs"], **entry["needs_by_variant"]}.items():
            where = f"{methods_file}: {method}." + ("needs" if variant is None else f"needs_by_variant.{variant}")
            if variant is not None and variant not in entry["variants"]:
                raise ConfigError(f"{where}: {method!r} has no variant {variant!r}")
            for need in needs:
                if need not in inputs:
                    raise ConfigError(
                        f"{where}: the {entry['track']} track provides no optional input {need!r}; "
                        f"known: {', '.join(sorted(inputs)) or 'none'}"
                    )


PIN_ON_FIRST_FETCH = "pin-on-first-fetch"  # a url's sha256 when the publisher gives none


def check_stand_in(dataset: str, entry: dict, registries: Registries) -> None:
    """A lab's copy stands for another dataset of its track that stands for none itself."""
    where = f"{registries.origin('datasets', dataset)}: {dataset}.stands_for.dataset"
    shipped = entry["stands_for"]["dataset"]
    if shipped == dataset:
        raise ConfigError(f"{where}: a dataset cannot stand for itself")
    if shipped not in registries.datasets:
        raise ConfigError(f"{where}: unknown dataset id {shipped!r}; known: {', '.join(sorted(registries.datasets))}")
    if "stands_for" in registries.datasets[shipped]:
        raise ConfigError(
            f"{where}: {shipped} stands for {registries.datasets[shipped]['stands_for']['dataset']} "
            "itself: name that one"
        )
    if registries.datasets[shipped]["track"] != entry["track"]:
        raise ConfigError(
            f"{where}: {shipped} is a {registries.datasets[shipped]['track']} dataset, this one a {entry['track']} one"
        )


def check_source_files(registries: Registries, kind: str) -> None:
    """A url must come with its sha256 (or an explicit ``pin-on-first-fetch``); a dataset's files must
    match its source (urls for ``url``, paths for ``local``); file names are unique per entry."""
    for entry_id, entry in getattr(registries, kind).items():
        names = set()
        for index, file in enumerate(entry.get("files", [])):
            where = f"{registries.origin(kind, entry_id)}: {entry_id}.files[{index}]"
            if file["name"] in names:
                raise ConfigError(f"{where}: file name {file['name']!r} given twice")
            names.add(file["name"])
            if "url" in file and "sha256" not in file:
                raise ConfigError(
                    f"{where}: the url {file['url']} has no sha256; give the file's digest, or "
                    f"'{PIN_ON_FIRST_FETCH}' to trust the first download and pin it"
                )
            source = entry.get("source")
            if source in ("url", "local") and ("url" in file) != (source == "url"):
                wanted = "a url" if source == "url" else "a path"
                raise ConfigError(f"{where}: a {source} source lists files by {wanted}")


def check_embedding_names(registries: Registries) -> None:
    """Every ``embedding`` a method variant names, and every entry's ``of``, must exist."""
    known = registries.embeddings
    for method, entry in registries.methods.items():
        for variant, overrides in entry["variants"].items():
            name = {**entry["params"], **overrides}.get("embedding")
            if name is not None and name not in known:
                raise ConfigError(
                    f"{registries.origin('methods', method)}: {method}.variants.{variant}: unknown embedding "
                    f"{name!r}; known: {', '.join(sorted(known)) or 'none'}"
                )
    for embedding, entry in known.items():
        if "of" in entry and entry["of"] not in known:
            raise ConfigError(
                f"{registries.origin('embeddings', embedding)}: {embedding}.of: unknown embedding {entry['of']!r}"
            )

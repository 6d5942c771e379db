"""celldag.jobs.archives: one file out of a .deb (ar + data.tar.*) or a .zip, built here byte by byte."""

from __future__ import annotations

import io
import sys
import tarfile
import zipfile

import pytest

from celldag.jobs.archives import extract_member

PAYLOAD = b"gene_id\tsymbol\n1\tA1BG\n"
MEMBER = "usr/lib/R/site-library/pkg/extdata/table.tsv"


def _tar(compression: str) -> bytes:
    """A data.tar like dpkg builds it: "./"-prefixed paths, directories before files."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}") as tar:
        directory = tarfile.TarInfo("./usr/lib/R/site-library/pkg/extdata")
        directory.type = tarfile.DIRTYPE
        tar.addfile(directory)
        for name, data in ((f"./{MEMBER}", PAYLOAD), ("./usr/share/doc/pkg/copyright", b"Artistic-2.0")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _ar(members: list[tuple[str, bytes]]) -> bytes:
    out = b"!<arch>\n"
    for name, data in members:
        header = f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        assert len(header) == 60
        out += header + data + (b"\n" if len(data) % 2 else b"")
    return out


def _deb(path, data_name: str, data: bytes):
    # control member of odd length: the reader must skip the ar padding byte to find data.tar
    path.write_bytes(_ar([("debian-binary", b"2.0\n"), ("control.tar.gz", b"odd"), (data_name, data)]))
    return path


@pytest.mark.parametrize("compression", ["xz", "gz"])
def test_deb_member_extracted(tmp_path, compression):
    deb = _deb(tmp_path / "pkg.deb", f"data.tar.{compression}", _tar(compression))
    extract_member(deb, MEMBER, tmp_path / "out" / "table.tsv")
    assert (tmp_path / "out" / "table.tsv").read_bytes() == PAYLOAD
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["table.tsv"]  # no temporary left


def test_deb_missing_member_names_archive_and_member(tmp_path):
    deb = _deb(tmp_path / "pkg.deb", "data.tar.xz", _tar("xz"))
    with pytest.raises(ValueError) as err:
        extract_member(deb, "usr/lib/missing.sqlite", tmp_path / "out.sqlite")
    assert str(err.value) == f"{deb}: no member 'usr/lib/missing.sqlite' in its data.tar.xz"
    assert not (tmp_path / "out.sqlite").exists()


def test_deb_directory_member_rejected(tmp_path):
    deb = _deb(tmp_path / "pkg.deb", "data.tar.xz", _tar("xz"))
    with pytest.raises(ValueError, match="is not a regular file"):
        extract_member(deb, "usr/lib/R/site-library/pkg/extdata", tmp_path / "out")


def test_deb_without_data_tar(tmp_path):
    deb = tmp_path / "pkg.deb"
    deb.write_bytes(_ar([("debian-binary", b"2.0\n")]))
    with pytest.raises(ValueError, match=r"no data\.tar member"):
        extract_member(deb, MEMBER, tmp_path / "out")


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="tarfile reads zstd from Python 3.14 on")
def test_deb_with_zstd_data_gives_a_clear_error(tmp_path):
    # zstd-compressed data.tar (newer Debian/Ubuntu packages) needs a newer Python
    deb = _deb(tmp_path / "pkg.deb", "data.tar.zst", b"\x28\xb5\x2f\xfd")
    with pytest.raises(ValueError, match=r"cannot decompress its data\.tar\.zst"):
        extract_member(deb, MEMBER, tmp_path / "out")


def test_zip_member_extracted_and_missing_member(tmp_path):
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("GenePT/NCBI_summary_of_genes.json", '{"CD3E": "T cell"}')
        bundle.writestr(MEMBER, PAYLOAD)
    extract_member(archive, MEMBER, tmp_path / "table.tsv")
    assert (tmp_path / "table.tsv").read_bytes() == PAYLOAD
    with pytest.raises(ValueError) as err:
        extract_member(archive, "GenePT/missing.pickle", tmp_path / "x")
    assert str(err.value) == f"{archive}: no member 'GenePT/missing.pickle'"


def test_other_files_rejected(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not an archive")
    with pytest.raises(ValueError, match="neither a Debian package"):
        extract_member(path, MEMBER, tmp_path / "out")

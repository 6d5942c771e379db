"""Render a results page in headless Chromium (Debian's package, installed when missing) and read back the DOM.

The page itself has no JavaScript; a copy beside it gets a small script that writes, once the page
has loaded, every image's naturalWidth into the DOM, so that ``--dump-dom`` shows which images loaded.
``texts`` reads elements of that DOM (html5lib's tree), e.g. the bold spans of the figures' captions.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import debian_packages

PROBE = """<script>
window.addEventListener("load", () => {
  const widths = Array.from(document.images, (image) => [image.getAttribute("src"), image.naturalWidth]);
  const out = document.createElement("pre");
  out.id = "image-widths";
  out.textContent = JSON.stringify(widths);
  document.body.appendChild(out);
});
</script>"""
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--allow-file-access-from-files",
    "--virtual-time-budget=10000",
    "--dump-dom",
)


def texts(dom: str, path: str) -> list[str]:
    """The text of each element at ``path`` (ElementTree's, from the root: ".//figcaption//strong") of ``dom``."""
    import html5lib

    tree = html5lib.parse(dom, namespaceHTMLElements=False)
    return ["".join(element.itertext()) for element in tree.iterfind(path)]


def chromium() -> str:
    """The Chromium binary; raises debian_packages.NotInstallable with the reason where it cannot be had."""
    debian_packages.ensure_installed(("chromium",), ("chromium",))
    return debian_packages.binary("chromium")


def rendered_dom(page: Path) -> tuple[str, dict[str, int]]:
    """The DOM Chromium renders of ``page`` and each image's naturalWidth (0: it did not load)."""
    probe = page.with_name(f".{page.stem}-probe.html")  # beside the page: relative image paths still resolve
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    try:
        with tempfile.TemporaryDirectory() as profile:
            result = subprocess.run(
                [chromium(), *FLAGS, f"--user-data-dir={profile}", probe.resolve().as_uri()],
                capture_output=True,
                text=True,
                timeout=120,
            )
    finally:
        probe.unlink()
    dom = result.stdout
    found = re.search(r'<pre id="image-widths">(.*?)</pre>', dom, re.S)
    if result.returncode != 0 or found is None:
        raise AssertionError(f"chromium rendered nothing (exit {result.returncode}): {result.stderr[-2000:]}")
    return dom, dict(json.loads(found.group(1).replace("&quot;", '"')))

"""report.html: one self-contained page that opens with the claims, embeds its plots and links every
cell to its records; rendered in headless Chromium where it is installed."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kdbench.report.claims import CLAIMS
from tests.unit.report_helpers import run_main, write_three_objectives

CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)


@pytest.fixture
def page(tmp_path: Path) -> Path:
    return (
        run_main(write_three_objectives(tmp_path / "results"), "--paper", plots=True)
        / "report.html"
    )


def test_the_page_opens_with_the_findings_then_the_claims_then_each_study(page: Path):
    text = page.read_text()
    sections = ("findings", "claims", "study-1", "claims-detail")
    findings, claims, study, detail = (text.index(f'<section id="{name}"') for name in sections)
    assert findings < claims < study < detail
    assert re.search(r"<h2>(.*?)</h2>", text).group(1) == "Findings"
    summary = text[claims:study]
    assert all(claim.id in summary for claim in CLAIMS)


def test_the_page_ends_with_evidence_md_its_example_level_tests_and_collapses(page: Path):
    text = page.read_text()
    evidence = text.index('<section id="evidence">')
    assert text.index('<section id="claims-detail"') < evidence
    shown = text[evidence:]
    assert "<h2>Example-level evidence and collapsed runs</h2>" in shown
    assert "<h3>Collapse rate per cell</h3>" in shown


def test_the_page_is_self_contained(page: Path):
    text = page.read_text()
    assert "<script" not in text and "<link" not in text and not re.search(r'src="(?!data:)', text)
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)"', text)
    assert len(images) == len(list(page.parent.glob("*.png"))) > 0
    assert all(base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n") for data in images)


def test_every_measured_cell_links_to_its_records(page: Path):
    links = re.findall(r'<a href="([^"#]+)">(\d+)</a>', page.read_text())
    assert len(links) == 24  # 3 objectives x 2 tasks x 4 seeds
    for href, seed in links:
        record = (page.parent / href).resolve()
        assert (
            record.name == "result.json"
            and record.is_file()
            and record.parent.name == f"seed{seed}"
        )


CHECKS = """<script>
window.addEventListener("load", () => {
  const findings = document.getElementById("findings").getBoundingClientRect();
  const images = [...document.images];
  document.body.dataset.images = images.map(i => i.complete && i.naturalWidth > 0).join(",");
  const onFirstScreen = findings.top >= 0 && findings.top < window.innerHeight;
  document.body.dataset.findingsOnFirstScreen = onFirstScreen;
  document.body.dataset.firstHeading = document.querySelector("h2").textContent;
  const captioned = i => i.closest("figure")?.querySelector("figcaption") != null;
  document.body.dataset.captioned = images.map(captioned).join(",");
});
</script>"""


@pytest.mark.slow
@pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium (Debian's chromium package) to render the page"
)
def test_the_page_renders_in_a_browser(page: Path, tmp_path: Path):
    browser = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1280,900",
    ]
    shot = tmp_path / "screenshot.png"
    shown = subprocess.run(
        [*browser, "--enable-logging=stderr", "--v=0", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.read_bytes().startswith(b"\x89PNG")
    assert not re.findall(r"CONSOLE.*", shown.stderr)  # a page with no script logs nothing
    probe = page.with_name(
        "probe.html"
    )  # the page plus a script that reports what the browser made of it
    probe.write_text(page.read_text().replace("</body>", CHECKS + "</body>"))
    dom = subprocess.run(
        [*browser, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    images = re.search(r'data-images="([^"]*)"', dom).group(1).split(",")
    assert len(images) == len(list(page.parent.glob("*.png"))) and set(images) == {"true"}
    assert 'data-findings-on-first-screen="true"' in dom and 'data-first-heading="Findings"' in dom
    assert set(re.search(r'data-captioned="([^"]*)"', dom).group(1).split(",")) == {"true"}

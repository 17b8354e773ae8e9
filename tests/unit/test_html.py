"""The HTML report in a real browser (headless Chromium) at 1400x900: the first screen at 2
and at 200 hosts holds what needs doing and the host x control map, nothing is wider than the
window; the page is one self-contained file, escaped, with the catalog's rationale and
references (links to their public homes)."""
from __future__ import annotations

import re
import struct

import pytest

import browser
import fleet
from gpuhost import htmlreport
from gpuhost import report as rep
from ansible_collections.gpuhost.stack.plugins.module_utils.controls import CATALOG


@pytest.mark.parametrize("n", [2, 200])
def test_the_first_screen_holds_what_needs_doing_and_the_map_and_nothing_is_wider(tmp_path, n):
    page = tmp_path / "r.html"
    htmlreport.write(rep.build("audit", rep.now(), fleet.fleet_hosts(n)), page)
    g = browser.geometry(page)
    assert g["viewport"] == "1400x900"
    assert int(g["first-problem-bottom"]) <= int(g["map-bottom"]) <= 900, g
    assert int(g["summary-bottom"]) > int(g["map-bottom"]), "the per-control counts come after the picture"
    html = page.read_text()
    # a cell a host and control (the unreachable host's whole column), and a bar a control
    assert html.count("<rect ") >= n * 20 and html.count('<svg width="140"') == len(CATALOG)
    assert int(g["scroll-width"]) <= 1400, g
    png = tmp_path / "r.png"
    browser.screenshot(page, png)
    width, height = struct.unpack(">II", png.read_bytes()[16:24])      # the PNG's IHDR
    assert (width, height) == (1400, 900)


def test_the_page_is_self_contained_escaped_and_explains_each_control():
    hosts = fleet.fleet_hosts(3)
    hosts["<script>alert(1)</script>"] = hosts.pop(next(iter(hosts)))
    page = htmlreport.render(rep.build("audit", rep.now(), hosts))
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert not re.search(r"""src\s*=\s*["']?(https?:)?//""", page), "nothing is fetched"
    # links are followed only when clicked: to the references' public homes, nothing else
    hrefs = re.findall(r'<a href="([^"]+)"', page)
    assert hrefs and all(h.startswith("https://") for h in hrefs)
    assert 'href="https://docs.kernel.org/admin-guide/kernel-parameters.html"' in page
    assert not re.search(r"<link\b|@import", page)
    for c in CATALOG:
        assert c.rationale.split(";")[0].replace("'", "&#39;") in page, c.id
        for ref in c.references:
            assert ref.replace("'", "&#39;").replace('"', "&#34;") in page
    assert page.count('<details class="host"') == 3

"""Serving the web UI (no browser): the page, its assets, cache and security headers, and
checks over the static files themselves (no inline script, nothing from the internet)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.ui.browser_support import INSTALL_HINT, chromium_path
from tunefleet.http import ui
from tunefleet.http.app import ServerOptions, build_app

STATIC = ui.STATIC_DIR
IMPORT = re.compile(
    r"""(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]"""
)


async def _api_thing(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


@pytest.fixture
async def client(aiohttp_client: object) -> TestClient:
    app = web.Application()
    app.router.add_get("/api/thing", _api_thing)
    ui.add_routes(app)
    return await aiohttp_client(app)  # type: ignore[operator, no-any-return]


async def test_the_page_is_served_at_root_with_a_strict_csp_and_no_caching(
    client: TestClient,
) -> None:
    resp = await client.get("/")
    assert resp.status == 200
    assert resp.content_type == "text/html"
    csp = resp.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "frame-ancestors 'none'" in csp
    assert resp.headers["Cache-Control"] == "no-cache"
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    html = await resp.text()
    build = client.app[ui.UI_BUILD_KEY]
    assert f"/static/{build}/js/main.js" in html
    assert ui.STATIC_PLACEHOLDER not in html


async def test_assets_are_cached_for_good_under_their_digest(client: TestClient) -> None:
    build = client.app[ui.UI_BUILD_KEY]
    js = await client.get(f"/static/{build}/js/main.js")
    assert js.status == 200
    assert "javascript" in js.content_type
    assert js.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    assert "Content-Security-Policy" in js.headers
    css = await client.get(f"/static/{build}/css/app.css")
    assert css.status == 200 and css.content_type == "text/css"


async def test_a_missing_or_stale_asset_is_404_and_not_cached(client: TestClient) -> None:
    build = client.app[ui.UI_BUILD_KEY]
    for path in (f"/static/{build}/js/nope.js", "/static/000000000000/js/main.js"):
        resp = await client.get(path)
        assert resp.status == 404, path
        assert resp.headers.get("Cache-Control") == "no-store", path


async def test_only_the_asset_files_are_served(client: TestClient) -> None:
    """Assets are looked up by name in the table made at start: no path a client sends
    reaches the file system, however it is spelled."""
    build = client.app[ui.UI_BUILD_KEY]
    for name in ("../ui.py", "..%2Fui.py", "js/../../ui.py", "%2e%2e/ui.py", "js", "/etc/passwd"):
        resp = await client.get(f"/static/{build}/{name}")
        assert resp.status == 404, name


async def test_the_api_keeps_its_own_headers(client: TestClient) -> None:
    resp = await client.get("/api/thing")
    assert resp.status == 200
    assert "Content-Security-Policy" not in resp.headers
    assert "Cache-Control" not in resp.headers


def test_the_digest_follows_the_files(tmp_path: Path) -> None:
    (tmp_path / "js").mkdir()
    (tmp_path / "js" / "a.js").write_text("export const a = 1;\n")
    before = ui.static_digest(tmp_path)
    assert ui.static_digest(tmp_path) == before
    (tmp_path / "js" / "a.js").write_text("export const a = 2;\n")
    assert ui.static_digest(tmp_path) != before


def test_the_orchestrator_app_serves_the_ui(tmp_path: Path) -> None:
    app = build_app(ServerOptions(data_dir=tmp_path, configs_dir=tmp_path))
    paths = {r.canonical for r in app.router.resources()}
    assert "/" in paths
    assert f"/static/{app[ui.UI_BUILD_KEY]}/{{name}}" in paths


class _PageScan(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag == "script" and not names.get("src"):
            self.problems.append("inline <script>")
        if tag == "style":
            self.problems.append("inline <style>")
        for name, value in attrs:
            if name.startswith("on") or name == "style":
                self.problems.append(f"<{tag} {name}=…>")
            if name in ("src", "href") and value:
                self.urls.append(value)


def test_the_page_has_no_inline_script_or_style_and_loads_only_its_own_files() -> None:
    scan = _PageScan()
    scan.feed(ui.INDEX_FILE.read_text())
    assert scan.problems == []
    for url in scan.urls:
        if url.startswith("#"):
            continue
        assert url.startswith(ui.STATIC_PLACEHOLDER + "/"), url
        assert (STATIC / url.removeprefix(ui.STATIC_PLACEHOLDER + "/")).is_file(), url


def test_every_module_import_resolves_to_a_file_and_nothing_comes_from_the_internet() -> None:
    modules = sorted(STATIC.rglob("*.js"))
    assert len(modules) > 10
    imports = 0
    for module in modules:
        text = module.read_text()
        for match in IMPORT.finditer(text):
            imports += 1
            target = match.group(1) or match.group(2)
            assert target.startswith("./") or target.startswith("../"), (module, target)
            assert (module.parent / target).resolve().is_file(), (module, target)
    assert imports > 40  # the pattern really finds the imports
    for path in [*modules, *STATIC.rglob("*.css"), *STATIC.rglob("*.html")]:
        # The SVG namespace is a name, and an example.com placeholder text, not downloads.
        urls = set(re.findall(r"https?://[^\s'\"`)]+", path.read_text()))
        urls = {url for url in urls if not url.startswith("https://example.com/")}
        assert urls <= {"http://www.w3.org/2000/svg"}, (path, urls)


def test_chromium_is_found_only_where_it_can_run(tmp_path: Path) -> None:
    not_executable = tmp_path / "chromium-text"
    not_executable.write_text("")
    runnable = tmp_path / "chromium"
    runnable.write_text("#!/bin/sh\n")
    runnable.chmod(0o755)
    assert chromium_path([None, str(tmp_path / "missing"), str(not_executable)]) is None
    assert chromium_path([None, str(not_executable), str(runnable)]) == str(runnable)
    assert "apt-get install chromium" in INSTALL_HINT


async def test_the_servers_one_prepare_hook_sets_ui_headers_and_streamed_request_ids(
    aiohttp_client: object, tmp_path: Path
) -> None:
    """build_app puts both duties in one on_response_prepare hook (one await per response):
    the UI's headers on the page and its assets only, errors included, and the request id
    on a response its handler prepared itself."""

    async def streamed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"x")
        return response

    app = build_app(ServerOptions(data_dir=tmp_path, configs_dir=tmp_path, local_runner=False))
    app.router.add_get("/test/streamed", streamed)
    assert len(app.on_response_prepare) == 1
    client: TestClient = await aiohttp_client(app)  # type: ignore[operator]
    build = app[ui.UI_BUILD_KEY]
    page = await client.get("/", headers={"X-Request-ID": "page-1"})
    assert page.headers["Cache-Control"] == "no-cache"
    assert page.headers["X-Request-ID"] == "page-1"
    missing = await client.get(f"/static/{build}/no-such.js")
    assert missing.status == 404 and missing.headers["Cache-Control"] == "no-store"
    assert "Content-Security-Policy" in missing.headers and "X-Request-ID" in missing.headers
    api = await client.get("/healthz")
    assert "Content-Security-Policy" not in api.headers and "X-Request-ID" in api.headers
    stream = await client.get("/test/streamed", headers={"X-Request-ID": "stream-7"})
    assert await stream.read() == b"x"
    assert stream.headers["X-Request-ID"] == "stream-7"
    assert "Content-Security-Policy" not in stream.headers

"""The web UI: ``GET /`` (the one page) and its assets under ``/static/<build>/``.

The UI is plain ES modules and CSS (no build step), all served from here: the page
works with no internet access. Asset URLs carry a digest of the static files, so the
browser may cache them forever while the page itself is always revalidated; a new
tunefleet version changes the digest and with it every asset URL. The assets are the
files found under ``static/`` at start, looked up by name: no path a client sends reaches
the file system, and a Range no byte satisfies gets 416 (``http/byte_ranges.py``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from aiohttp import web

from tunefleet.http.byte_ranges import refuse_unsatisfiable

STATIC_DIR = Path(__file__).parent / "static"
INDEX_FILE = STATIC_DIR / "index.html"
# index.html names its assets under this placeholder; it becomes /static/<build>.
STATIC_PLACEHOLDER = "{{static}}"

# Everything from this origin, nothing inline, no plugins, no framing. The page's
# scripts are ES modules and its styles one stylesheet; charts are built with the DOM.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"

UI_BUILD_KEY: web.AppKey[str] = web.AppKey("ui_build", str)
UI_INDEX_KEY: web.AppKey[bytes] = web.AppKey("ui_index", bytes)
UI_ASSETS_KEY: web.AppKey[dict[str, Path]] = web.AppKey("ui_assets", dict)


def asset_files(root: Path = STATIC_DIR) -> dict[str, Path]:
    """Every asset by its name under ``root`` (``js/app.js``), in name order."""
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}


def static_digest(root: Path = STATIC_DIR) -> str:
    """A short digest of every asset's path and content: changes whenever any asset does."""
    digest = hashlib.sha256()
    for name, path in sorted(asset_files(root).items()):
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def static_prefix(build: str) -> str:
    return f"/static/{build}"


def add_routes(app: web.Application, *, headers_hook: bool = True) -> None:
    """Serve the page at ``/`` and its assets; called once from ``build_routes``.
    ``headers_hook=False``: the app's own ``on_response_prepare`` hook calls
    ``put_ui_headers`` (the server has one hook for every response, not one per duty)."""
    build = static_digest()
    page = INDEX_FILE.read_text(encoding="utf-8").replace(STATIC_PLACEHOLDER, static_prefix(build))
    app[UI_BUILD_KEY] = build
    app[UI_INDEX_KEY] = page.encode("utf-8")
    app[UI_ASSETS_KEY] = asset_files()
    app.router.add_get("/", index)
    app.router.add_get(static_prefix(build) + "/{name:.+}", asset, name="ui_static")
    if headers_hook:
        app.on_response_prepare.append(ui_headers)


async def index(request: web.Request) -> web.StreamResponse:
    return web.Response(body=request.app[UI_INDEX_KEY], content_type="text/html", charset="utf-8")


async def asset(request: web.Request) -> web.StreamResponse:
    path = request.app[UI_ASSETS_KEY].get(request.match_info["name"])
    if path is None:
        raise web.HTTPNotFound()
    found = path.stat()
    refuse_unsatisfiable(request, found.st_size, found.st_mtime)
    return web.FileResponse(path)


async def ui_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare`` hook: security and cache headers on the page and its
    assets (not on the API)."""
    put_ui_headers(request, response)


def put_ui_headers(request: web.Request, response: web.StreamResponse) -> None:
    """What ``ui_headers`` does, for a hook doing more."""
    path = request.path
    if path != "/" and not path.startswith("/static/"):
        return
    headers = response.headers
    headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "no-referrer"
    if response.status >= 400:
        headers["Cache-Control"] = "no-store"
    elif path == "/":
        headers["Cache-Control"] = REVALIDATE
    else:
        headers["Cache-Control"] = IMMUTABLE

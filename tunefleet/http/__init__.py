"""aiohttp adapters: routes, auth, SSE, the web UI. Translate HTTP into actor messages."""

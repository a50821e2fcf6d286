"""The API docs, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), served with their scripts and
styles from this machine (the ``fastapi-offline`` package's copies, MIT and Apache-2.0
licensed), so that they work without internet access: no CDN, no web fonts."""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

#: where the assets are served (open without the API key, as the docs are)
ASSETS = "/docs/static"


def add_docs(app: FastAPI) -> None:
    """``/docs``, ``/redoc`` and their assets on ``app`` (built with ``docs_url=None`` and
    ``redoc_url=None``)."""
    folder = resources.files("fastapi_offline").joinpath("static")
    app.mount(ASSETS, StaticFiles(directory=str(folder)), name="docs-assets")
    title = f"{app.title} - API docs"

    @app.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title=title,
                                   swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS}/favicon.png")  # fmt: skip

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=app.openapi_url or "/openapi.json", title=title,
                              redoc_js_url=f"{ASSETS}/redoc.standalone.js",
                              redoc_favicon_url=f"{ASSETS}/favicon.png",
                              with_google_fonts=False)  # fmt: skip

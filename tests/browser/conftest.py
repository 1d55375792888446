"""Headless Chromium for the browser tests, with the network cut off.

The browser is Debian's chromium (or ``$CHROMIUM``), driven by Playwright from PyPI with ``executable_path``
(no browser download). If it is missing the tests skip locally with the reason, but **fail when CI=true**:
CI must not go green by skipping them. Every page is opened in a context that aborts any request that is not
``file://``, ``data:``/``blob:`` or to 127.0.0.1, and records it, so "works offline" is tested for real.

Every test in this folder is marked ``browser``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CHROMIUM_CANDIDATES = ["/usr/bin/chromium", "chromium", "chromium-browser"]
ALLOWED_HOSTS = {"127.0.0.1"}
LOCAL_SCHEMES = {"file", "data", "blob", "about"}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.browser)
            # make test (pytest-xdist --dist loadgroup): the tests that share the session's report build and
            # default notebook runs go to one worker ("kernels"), so those are made once; the live-kernel,
            # server and browser tests that share nothing with them go together to another ("live")
            live = Path(item.path).name in ('test_voila.py', 'test_jupyterlab.py')
            item.add_marker(pytest.mark.xdist_group("live" if live else "kernels"))


def find_chromium() -> str | None:
    """``$CHROMIUM`` if set (it must exist), else the first of /usr/bin/chromium, chromium, chromium-browser."""
    env = os.environ.get("CHROMIUM")
    if env:
        return shutil.which(env) or (env if Path(env).is_file() and os.access(env, os.X_OK) else None)
    for candidate in CHROMIUM_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def unavailable(reason: str):
    """Skip locally; fail under CI=true."""
    if in_ci():
        pytest.fail(f"{reason}; CI=true, so browser tests must run (.ci/run installs Debian's chromium)",
                    pytrace=False)
    pytest.skip(f"{reason} (install Debian's chromium or set CHROMIUM=/path/to/chrome to run browser tests)")


def is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in LOCAL_SCHEMES or parts.hostname in ALLOWED_HOSTS


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        unavailable(f"no Chromium found (CHROMIUM={os.environ.get('CHROMIUM', '')!r}, tried {CHROMIUM_CANDIDATES})")
    return path


@pytest.fixture(scope="session")
def browser(chromium_path):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (pip install -e '.[dev]')")
    pw = sync_playwright().start()
    try:
        # A browser that is present but does not start is a failure everywhere, never a skip.
        b = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_FLAGS, headless=True, timeout=60_000)
    except Exception:
        pw.stop()
        raise
    yield b
    b.close()
    pw.stop()


@dataclass
class OfflinePage:
    """A Playwright page whose network requests outside this machine are aborted and logged."""

    page: object
    blocked: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    console_warnings: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)


@pytest.fixture
def offline_page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    result = OfflinePage(page=None)

    def route(r):
        url = r.request.url
        if is_local(url):
            r.continue_()
        else:
            result.blocked.append(url)
            r.abort("internetdisconnected")

    context.route("**/*", route)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.on("console", lambda m: result.console_errors.append(m.text) if m.type == "error" else
            result.console_warnings.append(m.text) if m.type == "warning" else None)
    page.on("pageerror", lambda e: result.page_errors.append(str(e)))
    result.page = page
    yield result
    context.close()

"""The web UI with two orchestrators on PostgreSQL: a browser opening the standby's page
is sent to the active one's, and a page left on an orchestrator that comes back as a
standby (after a takeover) moves to the new active one, where it asks for the token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ha.ha_cluster import Cluster, wait_role
from tests.ha.pg import private_schema, unreachable_reason
from tests.ui.browser_support import INSTALL_HINT, sign_in

expect = pytest.importorskip("playwright.sync_api", reason=INSTALL_HINT).expect

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.timeout(120)]


@pytest.fixture
def cluster(tmp_path: Path, ui_configs: Path) -> Iterator[Cluster]:
    reason = unreachable_reason()
    if reason is not None:
        pytest.skip(reason)
    with private_schema("tf_ui") as url:
        built = Cluster(tmp_path, url, lease_s=1.0)
        for name in ("a", "b"):
            built.add(name).configs_dir = ui_configs
        try:
            yield built
        finally:
            built.stop()


def test_the_standby_page_redirects_and_a_page_follows_the_takeover(
    page: Any, cluster: Cluster
) -> None:
    first, second = cluster.nodes
    first.start()
    second.start(wait_ready=False)
    page.goto(second.url + "/")  # the standby's page: sent to the active one
    expect(page).to_have_url(first.url + "/")

    sign_in(page, first)
    first.kill()
    wait_role(second, "active", 10.0)
    first.start(wait_ready=False)  # back, as a standby, at the URL the page uses
    # The page reconnects to its URL, hears 503 naming the active one, and goes there.
    page.wait_for_url(f"{second.url}/**", timeout=30_000)
    expect(page.get_by_label("API token")).to_be_visible()  # the token stayed behind
    sign_in(page, second)
    expect(page.get_by_role("heading", name="Workers")).to_be_visible()

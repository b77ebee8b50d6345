"""The management UI end to end: log in, create a policy in the browser, see it apply to a
queue (the queue's policy link, effective definition and trimmed count), follow the link,
delete the policy; the charts are a full minute on the first load; the overview's node
panel and its alarm; a connection's page, its channel's page, and closing it from the UI;
a 401 brings the login form back, a refusal ("not_authorised") does not; a 404 is "not
available on this node". Only pages whose endpoints main serves are read from the node
itself; the other states are checked with routed replies.

Theory of operation:
1. One browser runs for this module, on a fresh profile directory, started from
   `/usr/bin/chromium` (`make test` installs it); Playwright never downloads a browser.
   Without that binary the UI tests are skipped with the reason.
2. Each test gets a new tab (`ui`), so the credentials the UI keeps in sessionStorage
   start empty, and the tab fails the test if a script on the page threw.
3. The node is the session's Warren subprocess (`broker`, `management`), so no asyncio
   loop runs in this thread, which Playwright's sync API needs. The UI is Warren's, so
   these tests are `warren_only`: a real RabbitMQ serves its own UI.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pika
import pytest
from playwright.sync_api import BrowserContext, Page, Route, expect, sync_playwright

pytestmark = pytest.mark.warren_only

# An upper bound on each wait for the page, not a timing claim: Playwright's 5 s default
# proved short on a machine busy with other suites.
EXPECT_TIMEOUT_MS = 20_000
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    if not CHROMIUM.exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM}: apt-get install chromium")
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            tmp_path_factory.mktemp("chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1300, "height": 900},
        )
        yield context
        context.close()


class UI:
    """One browser tab on the node's management UI."""

    def __init__(self, page: Page, management: tuple[str, str, str]) -> None:
        self.page = page
        self.base, self.user, self.password = management
        self.errors: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    def open(self, route: str = "") -> None:
        self.page.goto(f"{self.base}/#/{route}")

    def log_in(self, password: str | None = None) -> None:
        form = self.page.get_by_role("form", name="Log in")
        form.get_by_label("Username").fill(self.user)
        form.get_by_label("Password").fill(self.password if password is None else password)
        form.get_by_role("button", name="Log in").click()

    def heading(self, name: str | re.Pattern[str]) -> None:
        expect(self.page.get_by_role("heading", name=name, level=1)).to_be_visible()


@pytest.fixture
def ui(browser: BrowserContext, management: tuple[str, str, str]) -> Iterator[UI]:
    page = browser.new_page()
    tab = UI(page, management)
    yield tab
    page.close()
    assert tab.errors == [], "a script on the page threw"


def test_the_ui_needs_no_credentials_and_the_api_still_does(
    management: tuple[str, str, str],
) -> None:
    base = management[0]
    with urllib.request.urlopen(f"{base}/", timeout=10) as index:
        assert index.headers.get_content_type() == "text/html"
        assert b'src="/ui/js/app.js"' in index.read()
    with urllib.request.urlopen(f"{base}/ui/js/app.js", timeout=10) as script:
        assert script.headers.get_content_type() in {"text/javascript", "application/javascript"}
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{base}/api/overview", timeout=10)
    refused.value.close()
    assert refused.value.code == 401


def test_log_in_shows_the_overview(ui: UI) -> None:
    ui.open()
    ui.heading("Log in")
    ui.log_in(password="wrong")
    expect(ui.page.get_by_role("form", name="Log in").get_by_role("alert")).to_have_text(
        "Login failed"
    )
    ui.log_in()
    ui.heading("Overview")
    expect(ui.page.get_by_role("navigation", name="Main")).to_be_visible()
    totals = ui.page.locator("section", has=ui.page.get_by_role("heading", name="Totals"))
    expect(totals).to_contain_text("Warren")
    expect(ui.page.get_by_role("img", name="Queued messages")).to_be_visible()


def test_a_401_shows_the_login_form_again(ui: UI) -> None:
    ui.open()
    ui.log_in()
    ui.heading("Overview")
    wrong = "Basic " + base64.b64encode(f"{ui.user}:wrong".encode()).decode()
    ui.page.evaluate("(value) => sessionStorage.setItem('warren.authorization', value)", wrong)
    ui.open("queues")
    ui.heading("Log in")
    expect(ui.page.get_by_role("navigation", name="Main")).to_be_hidden()


def test_an_endpoint_the_node_lacks_is_not_available(ui: UI) -> None:
    def missing(route: Route) -> None:
        body = json.dumps({"error": "Object Not Found", "reason": "Not Found"})
        route.fulfill(status=404, content_type="application/json", body=body)

    ui.page.route(re.compile(r"/api/connections$"), missing)
    ui.open("connections")
    ui.log_in()
    ui.heading("Connections")
    expect(ui.page.get_by_role("heading", name="Not available on this node")).to_be_visible()


def test_a_refusal_keeps_the_user_logged_in(ui: UI) -> None:
    """RabbitMQ refuses a path a user's tags do not cover with 401 "not_authorised"."""

    def refused(route: Route) -> None:
        body = json.dumps({"error": "not_authorised", "reason": "Not administrator user"})
        route.fulfill(status=401, content_type="application/json", body=body)

    ui.page.route(re.compile(r"/api/users$"), refused)
    ui.open("users")
    ui.log_in()
    ui.heading("Users")
    notice = ui.page.locator(".notice", has=ui.page.get_by_role("heading", name="Not allowed"))
    expect(notice).to_contain_text("Not administrator user")
    expect(ui.page.get_by_role("navigation", name="Main")).to_be_visible()


@pytest.fixture
def queue(broker: Any, unique: str) -> Iterator[str]:
    """A queue named `<unique>.q` holding five messages; deleted afterwards."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.confirm_delivery()
    name = f"{unique}.q"
    channel.queue_declare(name)
    for number in range(5):
        channel.basic_publish("", name, f"m{number}".encode())
    yield name
    channel.queue_delete(name)
    connection.close()


@pytest.fixture
def policy_name(management: tuple[str, str, str], unique: str) -> Iterator[str]:
    """A policy name for the test to create; deleted through the API if the test did not."""
    name = f"{unique}-p"
    yield name
    base, user, password = management
    request = urllib.request.Request(
        f"{base}/api/policies/%2F/{quote(name, safe='')}", method="DELETE"
    )
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    try:
        urllib.request.urlopen(request, timeout=10).close()
    except urllib.error.HTTPError as failure:
        failure.close()
        assert failure.code == 404  # the test deleted it already


def test_a_policy_created_in_the_ui_applies_to_the_queue(
    ui: UI, queue: str, policy_name: str
) -> None:
    page = ui.page
    ui.open("policies")
    ui.log_in()
    ui.heading("Policies")
    form = page.get_by_role("form", name="Add / update policy")
    form.get_by_label("Name").fill(policy_name)
    form.get_by_label("Pattern").fill(f"^{re.escape(queue)}$")
    form.get_by_label("Apply to").select_option("queues")
    form.get_by_label("Definition").fill('{"max-length": 2}')
    form.get_by_role("button", name="Add / update policy").click()
    expect(form.get_by_role("status")).to_have_text(f"Policy {policy_name} saved.")
    policies = page.get_by_role("table", name="Policies", exact=True)
    expect(policies.get_by_role("row", name=policy_name)).to_be_visible()

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Queues").click()
    row = page.get_by_role("table", name="Queues").get_by_role("row", name=queue)
    expect(row.get_by_role("link", name=policy_name)).to_be_visible()
    expect(row.get_by_role("cell").nth(6)).to_have_text("2")  # Ready: max-length dropped 3

    row.get_by_role("link", name=queue).click()
    ui.heading(f"Queue {queue} in virtual host /")
    details = page.locator(".facts").first
    expect(details).to_contain_text('{"max-length":2}')
    details.get_by_role("link", name=policy_name).click()

    ui.heading(f"Policy {policy_name} in virtual host /")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete policy").click()
    ui.heading("Policies")
    expect(page.get_by_text("No policies.")).to_be_visible()


def chart_lines(ui: UI, title: str) -> dict[str, list[tuple[float, float]]]:
    """Each line of the chart named `title`: its points, and its stroke width last."""
    return ui.page.get_by_role("img", name=title).evaluate(
        """svg => Object.fromEntries([...svg.querySelectorAll("polyline")].map(line => [
            line.dataset.label,
            [...line.getAttribute("points").split(" ").map(p => p.split(",").map(Number)),
             [Number(line.getAttribute("stroke-width")), 0]],
        ]))"""
    )


def test_charts_are_a_full_minute_on_first_load(ui: UI, queue: str) -> None:
    """The node keeps the samples: the first update draws 13 lengths (12 rates between
    them) across the whole chart, where a browser sampling on its own would have one."""
    overview_calls: list[str] = []
    ui.page.on(
        "request", lambda r: overview_calls.append(r.url) if "/api/overview?" in r.url else None
    )
    ui.open()
    ui.log_in()
    ui.heading("Overview")
    expect(ui.page.get_by_role("img", name="Message rates")).to_be_visible()
    queued = chart_lines(ui, "Queued messages")
    rates = chart_lines(ui, "Message rates")
    assert len(overview_calls) <= 2  # the log-in check and the page's first update
    for label in ("Ready", "Unacked", "Total"):
        assert len(queued[label]) == 13 + 1
    assert all(len(points) == 12 + 1 for points in rates.values())
    xs = [x for x, _y in queued["Ready"][:-1]]
    assert xs == sorted(xs) and xs[-1] - xs[0] > 500  # the whole width of the chart
    # Publish is drawn first and widest, so Consumer ack over it leaves it showing
    assert rates["Publish"][-1][0] > rates["Consumer ack"][-1][0]

    ui.open(f"queues/%2F/{quote(queue, safe='')}")
    ui.heading(f"Queue {queue} in virtual host /")
    queue_rates = chart_lines(ui, "Message rates")
    assert len(queue_rates["Publish"]) == 12 + 1
    assert len(chart_lines(ui, "Queued messages")["Ready"]) == 13 + 1
    legend = ui.page.locator("figure", has=ui.page.get_by_role("img", name="Queued messages"))
    expect(legend).to_contain_text("Ready: 5")


def test_the_overview_shows_the_node_and_its_alarms(ui: UI) -> None:
    ui.open()
    ui.log_in()
    node = ui.page.get_by_role("group", name="Node resources")
    for text in ("Memory", " used", "Disk space", " free", "low watermark", "File descriptors"):
        expect(node).to_contain_text(text)
    expect(node.get_by_role("group", name="Alarms")).to_contain_text("none")
    expect(node.get_by_role("group", name="Uptime")).to_contain_text(re.compile(r"\d+[dhms]"))

    def alarmed(route: Route) -> None:
        body = route.fetch().json()
        body.update(mem_alarm=True, mem_used=900_000_000, mem_limit=800_000_000)
        route.fulfill(json=body)

    ui.page.route(re.compile(r"/api/nodes/[^/]+$"), alarmed)
    ui.page.reload()
    alarms = node.get_by_role("group", name="Alarms")
    expect(alarms).to_contain_text("memory alarm")
    expect(alarms).to_have_class(re.compile(r"\balarm\b"))
    expect(node.get_by_role("group", name="Memory")).to_contain_text("800 MB high watermark")


def test_a_connection_is_closed_from_its_page(ui: UI, broker: Any, unique: str) -> None:
    parameters = pika.URLParameters(broker.url)
    parameters.client_properties = {"connection_name": unique}
    connection = pika.BlockingConnection(parameters)
    channel = connection.channel()
    channel.basic_publish("", "no-such-queue", b"counted")
    try:
        page = ui.page
        ui.open("connections")
        ui.log_in()
        ui.heading("Connections")
        row = page.get_by_role("table", name="Connections").get_by_role("row", name=unique)
        for column in (7, 8):  # from and to client: bytes per second, never empty
            expect(row.get_by_role("cell").nth(column)).to_have_text(re.compile(r"B/s$"))
        link = row.get_by_role("link")
        name = link.inner_text()
        link.click()
        ui.heading(f"Connection {name}")
        expect(page.get_by_text(unique)).to_be_visible()  # the client's name
        channels = page.get_by_role("table", name="Channels of this connection")
        channels.get_by_role("link", name=f"{name} (1)").click()
        ui.heading(f"Channel {name} (1)")
        expect(page.get_by_role("img", name="Message rates")).to_be_visible()
        page.get_by_role("link", name=name, exact=True).click()  # back to its connection

        form = page.get_by_role("form", name="Close this connection")
        form.get_by_label("Reason").fill("closed by the UI test")
        form.get_by_role("button", name="Force close").click()
        ui.heading("Connections")
        expect(page.get_by_role("link", name=name, exact=True)).to_have_count(0)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            connection.process_data_events(time_limit=10)
        assert closed.value.reply_code == 320
        assert closed.value.reply_text == "CONNECTION_FORCED - closed by the UI test"
    finally:
        if connection.is_open:
            connection.close()


def test_a_user_who_may_not_see_the_node_still_gets_the_overview(ui: UI) -> None:
    """/api/nodes needs the monitoring tag: its refusal hides the node panel only."""

    def refused(route: Route) -> None:
        body = json.dumps({"error": "not_authorised", "reason": "Not monitor user"})
        route.fulfill(status=401, content_type="application/json", body=body)

    ui.page.route(re.compile(r"/api/nodes/[^/]+$"), refused)
    ui.open()
    ui.log_in()
    ui.heading("Overview")
    node = ui.page.locator("section", has=ui.page.get_by_role("heading", name="Node"))
    expect(node).to_contain_text("The node's resources need the monitoring tag.")
    expect(ui.page.get_by_role("img", name="Queued messages")).to_be_visible()
    expect(ui.page.get_by_role("heading", name="Not allowed")).to_have_count(0)

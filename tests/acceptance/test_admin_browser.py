"""The operator console in a real browser: headless Chromium driven by Selenium.

Logs in, opens the dead letter, retries a job, cancels a job, quiets a worker, and checks
each result in the page and in the database. With ``OJS_SCREENSHOTS_DIR`` set, it saves the
screenshots used by ``docs/how-to/operate-from-the-admin.md``.

Needs Chromium (``tests/acceptance/chromium.py``, ``make browser-deps``): without it the
test fails when ``CI=true`` and is skipped otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User

import django_ojs
from django_ojs import lifecycle
from django_ojs.models import Job, Worker
from tests.acceptance import chromium
from tests.factories import JobFactory, WorkerFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def browser() -> Iterator[object]:
    yield from chromium.driver()


def replaced(page) -> bool:
    """Whether ``page`` (a page's ``html`` element) has left the document.

    Chromedriver usually says so with ``StaleElementReferenceException``; while the next
    page is being committed it may instead answer "Node with given id does not belong to
    the document" (an inspector error), which means the same thing.
    """
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        page.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


class Console:
    """The admin as an operator sees it: visit pages, pick actions, confirm, read messages."""

    def __init__(self, driver, base_url: str):
        self.driver = driver
        self.base = base_url
        shots = os.environ.get("OJS_SCREENSHOTS_DIR")
        self.shots = Path(shots) if shots else None
        if self.shots:
            self.shots.mkdir(parents=True, exist_ok=True)

    def find(self, css: str):
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def navigate(self, element) -> None:
        """Click ``element`` and wait until the next page has replaced this one."""
        from selenium.webdriver.support.ui import WebDriverWait

        page = self.find("html")
        element.click()
        WebDriverWait(self.driver, 30).until(lambda driver: replaced(page))

    def click_link(self, text: str) -> None:
        from selenium.webdriver.common.by import By

        self.navigate(self.driver.find_element(By.LINK_TEXT, text))

    def choose_action(self, action: str, keys: list[str]) -> None:
        from selenium.webdriver.support.ui import Select

        for key in keys:
            self.find(f'input.action-select[value="{key}"]').click()
        Select(self.find('select[name="action"]')).select_by_value(action)
        self.navigate(self.find('button[name="index"]'))

    def confirm(self) -> None:
        assert "ojs-confirmation" in self.find("body").get_attribute("class")
        self.navigate(self.find('.ojs-confirm-buttons input[type="submit"]'))

    def messages(self) -> list[str]:
        from selenium.webdriver.common.by import By

        return [li.text for li in self.driver.find_elements(By.CSS_SELECTOR, ".messagelist li")]

    def screenshot(self, name: str, width: int = 1440) -> None:
        if not self.shots:
            return
        height = self.driver.execute_script(
            "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)"
        )
        height = min(max(height, 400), 2600)
        self.driver.set_window_size(width, height)
        # The window size includes the browser frame: grow it until the page fits.
        inner = self.driver.execute_script("return window.innerHeight")
        if inner < height:
            self.driver.set_window_size(width, 2 * height - inner)
        self.driver.save_screenshot(str(self.shots / f"{name}.png"))
        self.driver.set_window_size(1440, 900)


def _history() -> None:
    """Some finished work, so the dashboard charts have something to draw."""
    for i in range(6):
        job = lifecycle.enqueue("email.send", [f"user{i}@example.com"], queue="email")
        lifecycle.fetch(["email"], worker_id="worker-web-1")
        if i % 3:
            lifecycle.ack(job.pk, {"sent": True}, worker_id="worker-web-1")
        else:
            error = {
                "type": "SMTPError",
                "message": "421 4.7.0 Try again later",
                "backtrace": [
                    'File "shop/handlers.py", line 41, in send_email',
                    "    smtp.sendmail(sender, [address], body)",
                    'File "/usr/lib/python3.11/smtplib.py", line 902, in sendmail',
                    "    raise SMTPDataError(code, resp)",
                    "smtplib.SMTPDataError: (421, b'4.7.0 Try again later')",
                ],
            }
            lifecycle.fail(job.pk, error, worker_id="worker-web-1")
    lifecycle.enqueue("report.build", [{"month": "2026-10"}], queue="reports")


def test_operator_console_in_a_browser(browser, live_server):
    User.objects.create_superuser("admin", "admin@example.com", "admin-pw")
    WorkerFactory(id="worker-web-1", hostname="web-1", pid=4242, queues=["email", "reports"])
    _history()
    dead = JobFactory(
        discarded=True,
        type="invoice.render",
        queue="billing",
        args=[{"invoice": 1042}],
        error={
            "type": "TemplateError",
            "code": "handler_error",
            "message": "missing template 'invoice.html'",
            "attempt": 3,
            "backtrace": [
                "File 'billing/handlers.py', line 12, in render",
                "TemplateError: missing template 'invoice.html'",
            ],
        },
        errors=[],
    )
    waiting = lifecycle.enqueue("report.build", [{"month": "2026-11"}], queue="reports")
    ui = Console(browser, live_server.url)

    # Log in.
    ui.open("/admin/")
    ui.find("#id_username").send_keys("admin")
    ui.find("#id_password").send_keys("admin-pw")
    ui.navigate(ui.find('input[type="submit"]'))
    assert "Dead letter" in ui.find("#content-main").text
    ui.screenshot("admin-index")

    # Dashboard.
    ui.click_link("Dashboard")
    ui.find("#toggle-nav-sidebar").click()  # more room for the tables (remembered by the browser)
    assert ui.find("#ojs-per-minute-chart").is_displayed()
    assert "email" in ui.find("#ojs-state-table").text
    ui.screenshot("dashboard")

    # The dead letter: retry the job.
    ui.open("/admin/")
    ui.click_link("Dead letter")
    assert "missing template" in ui.find("#result_list").text
    ui.screenshot("dead-letter")
    ui.choose_action("retry_jobs", [str(dead.pk)])
    ui.screenshot("confirm-retry")
    ui.confirm()
    assert ui.messages() == ["1 retried"]
    assert Job.objects.get(pk=dead.pk).state == "available"

    # A job's page: cancel it from its own button.
    ui.open(f"/admin/ojs/job/{waiting.pk}/change/")
    assert "report.build" in ui.find("#content-main").text
    ui.navigate(ui.find('form.ojs-object-action button[type="submit"]'))  # Cancel comes first
    ui.confirm()
    assert ui.messages() == ["1 cancelled"]
    assert Job.objects.get(pk=waiting.pk).state == "cancelled"
    ui.screenshot("jobs-after-cancel")

    # A failed job's page: payload, error history with backtrace, timeline.
    failed = Job.objects.filter(queue="email", state="retryable").first()
    ui.open(f"/admin/ojs/job/{failed.pk}/change/")
    assert "SMTPError" in ui.find("#content-main").text
    ui.screenshot("job-detail")

    # Workers: quiet one; the directive goes out in the next heartbeat reply.
    ui.open("/admin/ojs/worker/")
    ui.choose_action("quiet_workers", ["worker-web-1"])
    ui.confirm()
    assert ui.messages() == ["1 asked to go quiet (delivered in their next heartbeat reply)"]
    assert Worker.objects.get(pk="worker-web-1").directive == "quiet"
    assert lifecycle.beat("worker-web-1").state == "quiet"
    ui.open("/admin/ojs/worker/")
    ui.screenshot("workers")

    # Queues: counts by state, pause.
    ui.open("/admin/ojs/queue/")
    ui.choose_action("pause_queues", ["reports"])
    ui.confirm()
    assert ui.messages() == ["1 paused"]
    ui.screenshot("queues")

    # Workflows: a failed order pipeline's graph, then "retry failed step" resumes it.
    order = django_ojs.chain(
        django_ojs.job("order.charge", [1042], queue="orders"),
        django_ojs.job("order.ship", [1042], queue="orders"),
        name="order 1042",
    )
    # worker-web-1 was quieted above: it gets no new jobs (graceful shutdown §5.1).
    assert lifecycle.fetch(["orders"], worker_id="worker-web-1") == []
    (charge,) = lifecycle.fetch(["orders"], worker_id="worker-web-2")
    lifecycle.fail(charge.pk, {"message": "card declined", "retryable": False},
                   worker_id="worker-web-2")  # fmt: skip
    ui.open("/admin/ojs/workflow/")
    assert "order 1042" in ui.find("#result_list").text
    ui.open(f"/admin/ojs/workflow/{order.pk}/change/")
    svg = ui.find("svg.ojs-workflow-graph")
    assert svg.is_displayed()
    nodes = svg.find_elements("css selector", "g.ojs-node")
    assert [n.get_attribute("data-state") for n in nodes] == ["discarded", "cancelled"]
    ui.screenshot("workflow-graph")
    ui.navigate(svg.find_element("css selector", "a.ojs-node-link"))  # the failed step's job
    assert "order.charge" in ui.find("#content-main").text
    ui.open("/admin/ojs/workflow/")
    ui.choose_action("retry_failed_steps", [str(order.pk)])
    ui.confirm()
    assert ui.messages() == ["1 retried"]
    ui.open(f"/admin/ojs/workflow/{order.pk}/change/")
    states = [
        n.get_attribute("data-state")
        for n in ui.find("svg.ojs-workflow-graph").find_elements("css selector", "g.ojs-node")
    ]
    assert states == ["available", "pending"]


def test_operator_retries_every_matching_dead_letter_and_watches_the_dashboard(
    browser, live_server, settings
):
    """Search by an args fragment, retry all 1,000 matching dead letters, see it live."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    settings.OJS_ADMIN_REFRESH_SECONDS = 1
    User.objects.create_superuser("admin", "admin@example.com", "admin-pw")
    matching = JobFactory.build_batch(1000, discarded=True, type="invoice.render",
                                      queue="billing", args=[{"batch": "b-7"}])  # fmt: skip
    others = JobFactory.build_batch(20, discarded=True, type="invoice.render",
                                    queue="billing", args=[{"batch": "b-8"}])  # fmt: skip
    Job.objects.bulk_create(matching + others)
    ui = Console(browser, live_server.url)
    ui.open("/admin/login/?next=/admin/ojs/deadletterjob/")
    ui.find("#id_username").send_keys("admin")
    ui.find("#id_password").send_keys("admin-pw")
    ui.navigate(ui.find('input[type="submit"]'))

    # Search the dead letter by a JSON fragment of the arguments.
    ui.find("#searchbar").send_keys('args:[{"batch": "b-7"}]')
    ui.navigate(ui.find('#changelist-search input[type="submit"]'))
    assert "1000" in ui.find("#changelist .paginator").text.replace(",", "")

    # Select every matching job (not only this page) and retry them all.
    ui.find("#action-toggle").click()
    ui.find("div.actions span.question a").click()  # "Select all 1000 …"
    Select(ui.find('select[name="action"]')).select_by_value("retry_jobs")
    ui.navigate(ui.find('button[name="index"]'))
    assert "all 1,000 jobs matching the current filter" in ui.find("#content-main").text
    ui.screenshot("confirm-retry-all-matching")
    ui.confirm()
    assert "ojs-bulk" in ui.find("body").get_attribute("class")
    WebDriverWait(browser, 300).until(
        lambda driver: driver.find_element(By.ID, "ojs-bulk-status").text == "Done."
    )
    assert ui.find("#ojs-bulk-processed").text == "1000"
    assert ui.find("#ojs-bulk-summary").text == "1000 retried"
    ui.screenshot("retry-all-matching-done")
    assert Job.objects.filter(pk__in=[j.pk for j in matching], state="available").count() == 1000
    assert Job.objects.filter(pk__in=[j.pk for j in others], state="discarded").count() == 20

    # The dashboard updates in place: no reload (a marker set on the page survives).
    ui.open("/admin/ojs/dashboard/")
    browser.execute_script("window.ojsNoReload = 'still here';")
    card = "//a[contains(@class, 'ojs-card')][.//div[@class='ojs-card-label'][text()='available']]"
    assert browser.find_element(By.XPATH, card).text.startswith("1000")
    django_ojs.enqueue_many(
        [django_ojs.job("invoice.render", [i], queue="billing") for i in range(5)]
    )
    WebDriverWait(browser, 120).until(
        lambda driver: driver.find_element(By.XPATH, card).text.startswith("1005")
    )
    assert browser.execute_script("return window.ojsNoReload") == "still here"

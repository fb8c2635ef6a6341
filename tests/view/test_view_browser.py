"""The `srpo-dsl view` page in a real headless Chromium (the system's, with its chromedriver: Selenium
Manager never downloads anything). Skipped when Chromium is missing, unless SRPO_DSL_BROWSER_TESTS=required
(set by .ci/run), which makes a missing browser a failure."""

import json
import os
import shutil
import time
from itertools import pairwise
from pathlib import Path

import pytest

from tests.support.clitools import cli
from tests.support.training import train_env
from tests.support.viewtools import as_training_run, many_episodes, scripted_run, traces_of

pytestmark = pytest.mark.browser

REQUIRED = os.environ.get("SRPO_DSL_BROWSER_TESTS") == "required"


def chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture(scope="module")
def browser():
    found = chromium()
    if found is None:
        message = "no chromium and chromedriver on PATH (apt-get install chromium chromium-driver)"
        if REQUIRED:
            pytest.fail(message + " and SRPO_DSL_BROWSER_TESTS=required")
        pytest.skip(message)
    if not REQUIRED:
        pytest.importorskip("selenium")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never download a browser or a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    options.binary_location = found[0]
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=found[1]), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_run(tmp_path_factory.mktemp("browser"))


def open_page(browser, path: Path) -> list[dict]:
    """Load the page; the browser's console messages (each read once)."""
    browser.get(path.resolve().as_uri())
    return browser.get_log("browser")


def page_of(folder: Path, *args) -> Path:
    done = cli("view", folder, *args, env=train_env())
    assert done.returncode == 0, done.stderr
    return folder / "view.html" if folder.is_dir() else folder.with_suffix(".html")


def rows(browser) -> list[list[str]]:
    return [
        [td.text for td in tr.find_elements("tag name", "td")]
        for tr in browser.find_elements("css selector", "#episodes tbody tr")
    ]


def text(browser, selector: str) -> str:
    return browser.find_element("css selector", selector).text


def test_the_page_loads_without_errors_and_counts_every_event(browser, run: Path) -> None:
    log = open_page(browser, page_of(run))
    assert [m for m in log if m["level"] in ("SEVERE", "WARNING")] == []
    traces = traces_of(run)
    events = sum(len(ep["events"]) for ep in traces)
    assert text(browser, "#summary").startswith(f"{len(traces)} episodes, {events} events (0 incomplete)")
    assert [r[0] for r in rows(browser)] == [ep["episode_id"] for ep in traces]
    for i, ep in enumerate(traces):  # each episode's timeline: one section per event, in order
        browser.find_elements("css selector", "#episodes tbody tr")[i].click()
        shown = browser.find_elements("css selector", "#timeline .event .event-type")
        assert [s.text for s in shown] == [e["event_type"] for e in ep["events"]]
    assert browser.get_log("browser") == []


def test_filters_narrow_the_list(browser, run: Path) -> None:
    from selenium.webdriver.support.ui import Select

    open_page(browser, page_of(run))
    traces = traces_of(run)
    Select(browser.find_element("id", "f-type")).select_by_value("parallel:solver")
    with_solver = [
        ep["episode_id"] for ep in traces if any(e["event_type"] == "parallel:solver" for e in ep["events"])
    ]
    assert [r[0] for r in rows(browser)] == with_solver and len(with_solver) == 4
    assert text(browser, "#count") == "4 of 6 episodes match"
    Select(browser.find_element("id", "f-invalid")).select_by_value("without")
    assert [r[0] for r in rows(browser)] == ["math-sample-1/1"]
    Select(browser.find_element("id", "f-type")).select_by_value("")
    Select(browser.find_element("id", "f-invalid")).select_by_value("")
    browser.find_element("id", "f-prompt").send_keys("sample-2")
    assert [r[0] for r in rows(browser)] == ["math-sample-2/0", "math-sample-2/1"]
    browser.find_element("id", "f-prompt").clear()
    browser.find_element("id", "f-max").send_keys("-0.05")
    assert [r[0] for r in rows(browser)] == [ep["episode_id"] for ep in traces if ep["reward"] <= -0.05]
    browser.find_element("id", "f-max").clear()
    browser.find_element(
        "css selector", '.graph [data-event-type="verify:verifier"]'
    ).click()  # the graph filters
    assert Select(browser.find_element("id", "f-type")).first_selected_option.text == "verify:verifier"
    assert len(rows(browser)) == 4
    assert browser.get_log("browser") == []


def test_a_timeline_shows_members_side_by_side_with_the_parsed_value_highlighted(browser, run: Path) -> None:
    open_page(browser, page_of(run))
    browser.find_elements("css selector", "#episodes tbody tr")[0].click()
    event = browser.find_elements("css selector", "#timeline .event")[1]  # parallel:solver, K = 2
    members = event.find_elements("css selector", ".member")
    assert len(members) == 2
    (a, b) = (m.rect for m in members)
    assert a["y"] == b["y"] and a["x"] + a["width"] <= b["x"]  # side by side
    assert [m.find_element("css selector", "mark.parsed").text for m in members] == ["4", "5"]
    assert members[0].find_element("css selector", ".text").text == "x = 4, so \\boxed{4}"
    assert "solver#1" in members[0].text and "valid" in members[0].text and "19 tokens" in members[0].text
    assert event.find_element("css selector", ".transition").text == "→ verify verifier"
    invalid = browser.find_elements("css selector", "#timeline .member.invalid")
    assert len(invalid) == 1 and invalid[0].find_elements("css selector", "mark") == []
    assert "broke its contract" in invalid[0].text


def test_a_training_run_shows_advantages_clipping_and_curves(browser, run: Path, tmp_path: Path) -> None:
    training = as_training_run(run, tmp_path / "t")
    log = open_page(browser, page_of(training))
    assert log == []
    assert len(browser.find_elements("css selector", "#curves-panel svg.chart")) == 3
    event = browser.find_elements("css selector", "#timeline .event")[1]
    assert event.find_element("css selector", ".badge.adv").text == "advantage 0.250"
    assert event.find_element("css selector", ".badge.clipped").text == "ratio clipped"
    first = browser.find_elements("css selector", "#timeline .event")[0]
    assert first.find_element("css selector", ".badge.unclipped").text == "ratio not clipped"


def tick_labels(chart, axis: str) -> list:
    """The chart's tick labels on `axis` ("x" or "y"): matplotlib's SVG names each tick's group."""
    return chart.find_elements("css selector", f'g[id*="-{axis}tick_"] text')


def test_chart_tick_labels_are_round_and_fit_their_panel(browser, run: Path, tmp_path: Path) -> None:
    training = as_training_run(run, tmp_path / "t")
    metrics = [json.loads(line) for line in (training / "metrics.jsonl").read_text().splitlines()]
    clip = [m | {f"role/{r}/clip_fraction": 0.0 for r in ("solver", "aggregator")} for m in metrics]
    (training / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in clip))
    assert open_page(browser, page_of(training)) == []
    charts = browser.find_elements("css selector", "#curves-panel svg.chart")
    assert [c.get_attribute("aria-label") for c in charts] == [
        "Return (mean; task score + invalid penalty)",
        "Invalid-output rate per role",
        "Clip fraction per role",
        "Held-out Avg@4 / Pass@4 (%)",
    ]
    score, _, flat, held = charts
    labels = tick_labels(score, "y")
    assert [t.text for t in labels] == ["0.05", "0.10", "0.15", "0.20", "0.25", "0.30"]  # 0.05..0.3 measured
    assert [t.text for t in tick_labels(score, "x")] == ["1", "2", "3"]  # whole steps
    panel = score.rect
    boxes = [t.rect for t in labels]
    assert all(panel["x"] <= b["x"] and b["x"] + b["width"] <= panel["x"] + panel["width"] for b in boxes)
    assert all(a["y"] + a["height"] <= b["y"] for b, a in pairwise(boxes))  # bottom-up, none overlaps
    assert [t.text for t in tick_labels(held, "y")] == ["0", "20", "40", "60", "80", "100"]  # its whole range
    assert tick_labels(flat, "y")[0].text == "0.00"  # a flat 0 at the foot of its range
    for chart in charts:  # each chart whole inside the curves panel, none over another
        assert chart.rect["width"] > 300 and chart.rect["height"] > 200
    assert all(
        a.rect["x"] + a.rect["width"] <= b.rect["x"] or a.rect["y"] < b.rect["y"] for a, b in pairwise(charts)
    )


@pytest.mark.slow
def test_ten_thousand_episodes_load_fast_one_page_at_a_time(browser, run: Path, tmp_path: Path) -> None:
    big = many_episodes(run, tmp_path / "big", 10_000)
    page = page_of(big)
    start = time.perf_counter()
    log = open_page(browser, page)  # returns once the page's scripts ran
    seconds = time.perf_counter() - start
    assert log == [] and seconds < 10, f"{seconds:.1f} s"
    assert len(rows(browser)) == 50 and text(browser, "#count") == "10000 episodes"
    assert text(browser, "#summary").startswith("10000 episodes, 45003 events")
    browser.find_element("id", "next").click()
    assert rows(browser)[0][0] == "big-25/0" and text(browser, "#page") == "51–100 (page 2 of 200)"
    browser.find_element("id", "f-prompt").send_keys("big-4999")
    assert [r[0] for r in rows(browser)] == ["big-4999/0", "big-4999/1"]

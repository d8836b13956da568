#!/usr/bin/env python3
"""Drives Debian's Chromium through Selenium against a running tinyperf agent and
prints what it saw as one JSON object; tests/browser.rs asserts on it.

  browser-check.py live BASE OUT          / while a run trains: charts grow, tiles, console
  browser-check.py static BASE OUT        / with JavaScript off: the server's state, tiles, figures
  browser-check.py run BASE OUT RUN_ID    /runs/RUN_ID with and without JavaScript
  browser-check.py reconnect BASE OUT     / open while the agent restarts: it catches up

Screenshots go to OUT. Never uses --virtual-time-budget (it hangs with an open
EventSource) or --dump-dom (it returns the page before any event arrives).
"""
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("SE_OFFLINE", "true")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def driver(javascript=True):
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--user-data-dir=" + tempfile.mkdtemp(prefix="tinyperf-chromium-")]:
        options.add_argument(flag)
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    # New headless mode shrinks the viewport below the window size; set it outright.
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                      {"width": 1280, "height": 2400, "deviceScaleFactor": 1, "mobile": False})
    d.set_page_load_timeout(30)
    return d


def console_problems(d):
    return [e["message"] for e in d.get_log("browser") if e.get("level") in ("SEVERE", "WARNING")]


def points(d):
    return d.execute_script(
        "var c = window.tinyperf && window.tinyperf.charts; if (!c) return null;"
        "var out = {}; for (var k in c) out[k] = c[k].points(); return out;")


def server_side(d):
    by = d.find_elements
    return {
        "state": d.find_element(By.ID, "state").text,
        "tiles": len(by(By.CSS_SELECTOR, ".tile")),
        "tile_models": [e.text for e in by(By.CSS_SELECTOR, ".tile .model")],
        "tile_power": [e.text for e in by(By.CSS_SELECTOR, ".tile-power")],
        "svg_figures": len(by(By.CSS_SELECTOR, "#server-figures figure svg")),
        "polylines": len(by(By.CSS_SELECTOR, "#server-figures polyline")),
        "recent_rows": len(by(By.CSS_SELECTOR, "#recent-telemetry tbody tr, #recent-train tbody tr")),
        "history_links": [e.get_attribute("href") for e in by(By.CSS_SELECTOR, "#history a")],
        "canvases": len(by(By.CSS_SELECTOR, "#charts canvas")),
    }


def set_data_cost(d):
    """Milliseconds per uPlot setData on the power chart, for series of N points."""
    return d.execute_script("""
        var chart = window.tinyperf.charts.power;
        var u = chart.plot;
        if (!u) return null;
        var out = {};
        [100, 1000, 10000].forEach(function (n) {
            var data = [[]];
            for (var s = 1; s < u.series.length; s++) data.push([]);
            for (var i = 0; i < n; i++) {
                data[0].push(i);
                for (var s = 1; s < data.length; s++) data[s].push(200 + 100 * Math.sin(i / 50 + s));
            }
            var rounds = 20, started = performance.now();
            // batch() draws at once rather than on the next microtask.
            for (var r = 0; r < rounds; r++) u.batch(function () { u.setData(data); });
            out[n] = (performance.now() - started) / rounds;
        });
        u.batch(function () { u.setData(chart.data); });
        return {series: u.series.length - 1, ms_per_set_data: out};
    """)


def live(base, out):
    d = driver()
    try:
        d.get(base + "/")
        wait = WebDriverWait(d, 60, poll_frequency=0.25)
        wait.until(lambda d: (points(d) or {}).get("throughput", 0) >= 2
                   and (points(d) or {}).get("power", 0) >= 2)
        first = points(d)
        started = time.time()
        wait.until(lambda d: points(d)["throughput"] > first["throughput"]
                   and points(d)["power"] > first["power"])
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#charts canvas")) >= 8)
        grown = points(d)
        d.save_screenshot(os.path.join(out, "live.png"))
        result = {
            "first": first,
            "grown": grown,
            "grew_in_s": round(time.time() - started, 2),
            "page": server_side(d),
            "updates": d.execute_script("return window.tinyperf.updates"),
            "mean_set_data_ms": d.execute_script(
                "var t = window.tinyperf; return t.updates ? t.setDataMs / t.updates : null"),
            "set_data_cost": set_data_cost(d),
            "epoch": d.find_element(By.ID, "epoch").text,
            "eta": d.find_element(By.ID, "eta").text,
            "charted": "charted" in (d.find_element(By.TAG_NAME, "body").get_attribute("class") or ""),
            "console": console_problems(d),
        }
    finally:
        d.quit()
    return result


def static(base, out):
    d = driver(javascript=False)
    try:
        d.get(base + "/")
        result = server_side(d)
        result["console"] = console_problems(d)
        d.save_screenshot(os.path.join(out, "no-javascript.png"))
    finally:
        d.quit()
    return result


def run_page(base, out, run_id):
    result = {}
    d = driver()
    try:
        d.get(base + "/runs/" + run_id)
        WebDriverWait(d, 30).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "#charts canvas")) >= 1)
        result["canvases"] = len(d.find_elements(By.CSS_SELECTOR, "#charts canvas"))
        result["chart_points"] = points(d)
        result["titles"] = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#charts h3")]
        result["console"] = console_problems(d)
        d.save_screenshot(os.path.join(out, "run.png"))
    finally:
        d.quit()
    d = driver(javascript=False)
    try:
        d.get(base + "/runs/" + run_id)
        result["nojs_polylines"] = len(d.find_elements(By.CSS_SELECTOR, "#server-figures polyline"))
        result["nojs_stages"] = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#stages tbody td:first-child")]
        d.save_screenshot(os.path.join(out, "run-no-javascript.png"))
    finally:
        d.quit()
    return result


def reconnect(base, out):
    """Loads / and waits while the agent is restarted under it: the page must reconnect
    its event stream and read /api/v1/live and the status again."""
    d = driver()
    try:
        d.get(base + "/")
        stat = lambda d, k: d.execute_script("return window.tinyperf." + k)
        WebDriverWait(d, 30).until(lambda d: stat(d, "liveLoads") >= 1
                                   and d.find_element(By.ID, "live").text == "live")
        # Tells the test it may restart the agent now.
        print("loaded", flush=True)
        WebDriverWait(d, 90, poll_frequency=0.25).until(
            lambda d: stat(d, "reconnects") >= 1 and stat(d, "liveLoads") >= 2
            and stat(d, "statusLoads") >= 1)
        result = {k: stat(d, k) for k in ["reconnects", "liveLoads", "statusLoads"]}
        result["live"] = d.find_element(By.ID, "live").text
        # The browser logs the refused connections while the agent was away.
        result["console"] = [m for m in console_problems(d)
                             if "api/v1/events" not in m and "ERR_CONNECTION_REFUSED" not in m]
    finally:
        d.quit()
    return result


def main():
    phase, base, out = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    if phase == "live":
        result = live(base, out)
    elif phase == "static":
        result = static(base, out)
    elif phase == "reconnect":
        result = reconnect(base, out)
    elif phase == "run":
        result = run_page(base, out, sys.argv[4])
    else:
        sys.exit("unknown phase " + phase)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

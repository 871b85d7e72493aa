"""Browser-level check of the MLflow UI over a tracked pipeline: the compare view of two ``train@``
runs, with *Show diff only*, lists ``train.estimator`` with their two values.

Not part of the test suite and not in the project's lock (it needs a browser). Setup, once::

    apt-get install -y chromium chromium-driver        # Debian: /usr/bin/chromium, /usr/bin/chromedriver
    python3 -m venv /tmp/browser-venv && /tmp/browser-venv/bin/pip install selenium

Run it against a store the pipeline (or a small run of it) wrote::

    /tmp/browser-venv/bin/python scripts/mlflow_ui_check.py --store sqlite:///mlflow/mlflow.db \\
        [--experiment agentr1-nano] [--shots DIR] [--mlflow .venv/bin/mlflow]

It starts ``mlflow ui`` on a free 127.0.0.1 port (or uses ``--url`` of a running server), finds
the two newest ``train@`` runs with different ``train.estimator`` params through the REST API,
opens their compare page in headless Chromium, clicks *Show diff only*, and fails (exit 1) unless
the page shows the ``train.estimator`` row with both values. With ``--shots`` it saves PNGs of
the compare view and, when they exist, of the pipeline's parent run with Table 3, the Models page, a
registered model version and a trace (``compare.png``, ``parent_run.png``, ``models.png``,
``model_version.png``, ``traces.png``, ``trace.png``).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(url: str, path: str, body: dict | None = None, query: dict | None = None) -> dict:
    """One MLflow REST call (POST with ``body``, else GET with ``query``)."""
    data = None if body is None else json.dumps(body).encode()
    qs = "?" + urllib.parse.urlencode(query) if query else ""
    req = urllib.request.Request(
        f"{url}/api/2.0/mlflow/{path}{qs}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


def start_ui(mlflow: str, store: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [mlflow, "ui", "--backend-store-uri", store, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"mlflow ui on {store} did not come up at {url}")


def browser() -> webdriver.Chrome:
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1600,1000"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=webdriver.ChromeService("/usr/bin/chromedriver"), options=opts)


def params(run: dict) -> dict[str, str]:
    return {p["key"]: p["value"] for p in run["data"].get("params", [])}


def tags(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def two_train_runs(url: str, exp_id: str) -> tuple[dict, dict]:
    runs = api(
        url,
        "runs/search",
        {
            "experiment_ids": [exp_id],
            "max_results": 200,
            "filter": "tags.`agentr1.stage` = 'train'",
            "order_by": ["attributes.start_time DESC"],
        },
    )
    runs = runs.get("runs", [])
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            if params(a).get("train.estimator") != params(b).get("train.estimator"):
                return a, b
    raise SystemExit(f"experiment {exp_id} has no two train@ runs with different train.estimator")


def wait_text(driver, text: str, timeout: float = 30) -> None:
    WebDriverWait(driver, timeout).until(lambda d: text in d.find_element(By.TAG_NAME, "body").text)


def tidy(driver) -> None:
    """Close the assistant side panel and pick the "Model training" view (not GenAI), if shown."""
    for xpath in ("//button[@aria-label='Close']", "//*[normalize-space(text())='Model training']"):
        for el in driver.find_elements(By.XPATH, xpath)[:1]:
            try:
                el.click()
                time.sleep(0.5)
            except Exception:  # noqa: BLE001 - cosmetic only
                pass


def check_compare(driver, url: str, exp_id: str, a: dict, b: dict, shots: Path | None) -> None:
    ids = json.dumps([a["info"]["run_id"], b["info"]["run_id"]])
    driver.get(
        f"{url}/#/compare-runs?runs={urllib.parse.quote(ids)}&experiments={urllib.parse.quote(json.dumps([exp_id]))}"
    )
    wait_text(driver, "Show diff only")
    tidy(driver)
    body = driver.find_element(By.TAG_NAME, "body").text
    if "retrieval.bm25.k1" not in body:
        raise SystemExit("compare view: the params table does not list the shared params before 'Show diff only'")
    switch = driver.find_element(By.XPATH, "//button[@role='switch'][@aria-label='Parameters - Show diff only']")
    switch.click()
    time.sleep(1.0)
    body = driver.find_element(By.TAG_NAME, "body").text
    va, vb = params(a)["train.estimator"], params(b)["train.estimator"]
    if "train.estimator" not in body or va not in body or vb not in body:
        raise SystemExit(f"compare view with diff only does not show train.estimator = {va} / {vb}")
    if "retrieval.bm25.k1" in body:  # a param both runs share: hidden by diff only
        raise SystemExit("compare view: 'Show diff only' did not hide the params the runs share")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", switch)
    time.sleep(0.5)
    if shots:
        driver.save_screenshot(str(shots / "compare.png"))
    print(
        f"ok: compare view of {a['info']['run_name']} vs {b['info']['run_name']}, diff only: train.estimator {va} vs {vb}"
    )


def shoot_extras(driver, url: str, exp_id: str, shots: Path) -> None:
    """The newest parent run with Table 3, the Models page, a registered version and a trace
    (whatever exists)."""
    parents = api(
        url,
        "runs/search",
        {
            "experiment_ids": [exp_id],
            "filter": "tags.`agentr1.role` = 'pipeline'",
            "order_by": ["attributes.start_time DESC"],
            "max_results": 50,
        },
    ).get("runs", [])
    parents = [r for r in parents if any(m["key"].startswith("table3/") for m in r["data"].get("metrics", []))]
    if parents:
        driver.get(f"{url}/#/experiments/{exp_id}/runs/{parents[0]['info']['run_id']}")
        wait_text(driver, "table3/")
        tidy(driver)
        metrics = driver.find_element(By.XPATH, "(//*[starts-with(normalize-space(text()), 'table3/')])[1]")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", metrics)
        time.sleep(1.0)
        driver.save_screenshot(str(shots / "parent_run.png"))
    models = api(url, "registered-models/search", query={"max_results": 10}).get("registered_models", [])
    if models:
        name = models[0]["name"]
        driver.get(f"{url}/#/models")
        wait_text(driver, name)
        tidy(driver)
        time.sleep(1.0)
        driver.save_screenshot(str(shots / "models.png"))
        versions = api(url, "model-versions/search", query={"filter": f"name='{name}'", "max_results": 50}).get(
            "model_versions", []
        )
        rl = [v for v in versions if any(t["key"] == "agentr1.train_run_id" for t in v.get("tags", []))]
        if rl:
            driver.get(f"{url}/#/models/{urllib.parse.quote(name)}/versions/{rl[0]['version']}")
            wait_text(driver, "agentr1.train_run_id")
            tidy(driver)
            time.sleep(1.0)
            driver.save_screenshot(str(shots / "model_version.png"))
    evals = api(
        url,
        "runs/search",
        {"experiment_ids": [exp_id], "filter": "tags.`agentr1.stage` = 'evaluate'", "max_results": 20},
    ).get("runs", [])
    ev = next((r for r in evals if tags(r).get("agentr1.policy") in ("grpo", "ppo")), evals[0] if evals else None)
    if ev:
        driver.get(f"{url}/#/experiments/{exp_id}/traces")
        time.sleep(8)
        tidy(driver)
        driver.save_screenshot(str(shots / "traces.png"))
        rows = driver.find_elements(By.XPATH, "//*[contains(normalize-space(text()), 'episode ')]")
        if rows:
            rows[0].click()
            time.sleep(5)
            driver.save_screenshot(str(shots / "trace.png"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", help="backend store URI to serve with `mlflow ui` (e.g. sqlite:///mlflow/mlflow.db)")
    ap.add_argument("--url", help="a running MLflow server instead of --store")
    ap.add_argument("--experiment", default="agentr1-nano")
    ap.add_argument("--mlflow", default=str(Path(".venv/bin/mlflow")), help="the mlflow executable")
    ap.add_argument("--shots", type=Path, help="folder for PNG screenshots")
    args = ap.parse_args(argv)
    if not (args.store or args.url):
        ap.error("give --store or --url")
    proc, url = (None, args.url.rstrip("/")) if args.url else start_ui(args.mlflow, args.store)
    driver = browser()
    try:
        exp = api(url, f"experiments/get-by-name?experiment_name={urllib.parse.quote(args.experiment)}")["experiment"]
        a, b = two_train_runs(url, exp["experiment_id"])
        if args.shots:
            args.shots.mkdir(parents=True, exist_ok=True)
        check_compare(driver, url, exp["experiment_id"], a, b, args.shots)
        if args.shots:
            shoot_extras(driver, url, exp["experiment_id"], args.shots)
    finally:
        driver.quit()
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())

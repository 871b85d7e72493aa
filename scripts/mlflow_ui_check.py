"""Browser-level check of the MLflow UI over a tracked pipeline: what a new user sees.

Not part of the test suite and not in the project's lock (it needs a browser). Setup, once::

    apt-get install -y chromium chromium-driver        # Debian: /usr/bin/chromium, /usr/bin/chromedriver
    python3 -m venv /tmp/browser-venv && /tmp/browser-venv/bin/pip install selenium

Run it against a store the pipeline (or a small run of it) wrote::

    /tmp/browser-venv/bin/python scripts/mlflow_ui_check.py --store sqlite:///mlflow/mlflow.db \\
        [--experiment agentr1-nano] [--shots DIR] [--mlflow .venv/bin/mlflow]

It starts ``mlflow ui`` on a free 127.0.0.1 port (or uses ``--url`` of a running server), reads
what to expect through the REST API and opens the pages in headless Chromium. Each check fails
the script (exit 1, naming what was missing); none is skipped:

1. **the RL view** (``agentr1.tracking.views``: the link ``agentr1 track`` prints): the dev EM,
   reward and tool-call charts, and every named run whose ``train@`` runs the store holds, as a
   group, without a click;
2. **the parent run**: its description shows Table 3 (the headline, the method rows);
3. **the Models page**: the registered model's ``champion`` tag (version, policy, test EM) in
   the list, without a click; the champion version's page: its description names the ``train@``
   run, the data it was judged on and the gate's verdict;
4. **a trace of an RL policy** (its link, as ``agentr1 track`` prints it for the champion): the
   episode's question and its spans;
5. **the compare view** of two ``train@`` runs with different ``train.estimator``, *Show diff
   only* clicked: the ``train.estimator`` row with both values, the shared params hidden.

With ``--shots`` it saves one PNG per check (``rl_view.png``, ``parent_run.png``, ``models.png``,
``version.png``, ``trace.png``, ``compare.png``) - the pictures of docs/RESULTS_GUIDE.md.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # agentr1's names, without its dependencies

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from agentr1.tracking import views
from agentr1.tracking.tags import GROUP_TAG, ROLE_TAG, STAGE_TAG

VARIANT_TAG = "agentr1.variant"  # agentr1.tracking.registry's, which imports MLflow


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
    """Close the assistant side panel and the shared-view banner, if shown (never navigates)."""
    for el in driver.find_elements(By.XPATH, "//button[@aria-label='Close']")[:2]:
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


def body_text(driver) -> str:
    return driver.find_element(By.TAG_NAME, "body").text


def open_page(driver, url: str, route: str, expect: str, timeout: float = 45) -> str:
    """Open ``route``, wait until the page shows ``expect``, tidy it; the page's text."""
    driver.get(f"{url}/{route}")
    try:
        wait_text(driver, expect, timeout)
    except TimeoutException:  # say what the page showed instead
        page = body_text(driver)[:800]
        raise SystemExit(f"{route}: '{expect}' not shown within {timeout:.0f} s; the page read:\n{page}") from None
    tidy(driver)
    time.sleep(2.0)  # charts and tables settle
    return body_text(driver)


def shot(driver, shots: Path | None, name: str) -> None:
    if shots:
        driver.save_screenshot(str(shots / name))


def check_rl_view(driver, url: str, exp_id: str, shots: Path | None) -> None:
    """1: the shared RL view lists every train@ run in its method's colour (one colour per named
    run) and shows the three RL charts, without a click."""
    runs = api(
        url,
        "runs/search",
        {"experiment_ids": [exp_id], "filter": f"tags.`{STAGE_TAG}` = 'train'", "max_results": 500},
    ).get("runs", [])
    colour = {tags(r).get(GROUP_TAG): tags(r).get(views.RUN_COLOR_TAG) for r in runs}
    if not runs or None in colour or None in colour.values():
        raise SystemExit(
            f"experiment {exp_id}: train@ runs without {GROUP_TAG} / {views.RUN_COLOR_TAG}: `agentr1 track`"
        )
    if len(set(colour.values())) != len(colour):
        raise SystemExit(f"RL view: two named runs share a colour: {colour}")
    body = open_page(driver, url, views.rl_view_path(exp_id), views.RL_METRICS[0])
    for section in ("rollout",):  # charts render when scrolled into view
        for el in driver.find_elements(By.XPATH, f"//*[normalize-space(text())='{section}']")[:1]:
            driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", el)
            time.sleep(2.0)
            body += "\n" + body_text(driver)
    names = [r["info"]["run_name"] for r in runs]
    missing = [m for m in views.RL_METRICS if m not in body] + [n for n in names if n not in body]
    if missing or f"{len(runs)} matching runs" not in body:
        raise SystemExit(f"RL view: not shown without a click: {missing or f'{len(runs)} matching runs'}")
    driver.execute_script("window.scrollTo(0, 0);")
    for el in driver.find_elements(By.XPATH, f"//*[normalize-space(text())='{views.RL_METRICS[0]}']")[:1]:
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", el)
    time.sleep(1.0)
    shot(driver, shots, "rl_view.png")
    print(f"ok: RL view: {len(runs)} train@ runs in {len(colour)} colours, charts {', '.join(views.RL_METRICS)}")


def check_parent(driver, url: str, exp_id: str, shots: Path | None) -> None:
    """2: the newest pipeline parent run's description (the Overview; *Show more* unfolds it)
    holds Table 3's rows."""
    parents = api(
        url,
        "runs/search",
        {
            "experiment_ids": [exp_id],
            "filter": f"tags.`{ROLE_TAG}` = 'pipeline'",
            "order_by": ["attributes.start_time DESC"],
            "max_results": 50,
        },
    ).get("runs", [])
    parents = [r for r in parents if "Table 3" in tags(r).get("mlflow.note.content", "")]
    if not parents:
        raise SystemExit("no pipeline parent run whose description holds Table 3: run the report stage")
    body = open_page(driver, url, f"#/experiments/{exp_id}/runs/{parents[0]['info']['run_id']}", "Table 3")
    for more in driver.find_elements(By.XPATH, "//*[normalize-space(text())='Show more']")[:1]:
        more.click()  # the Overview folds a long description after its first lines
        time.sleep(1.0)
        body = body_text(driver)
    if "GRPO" not in body or "Cold start" not in body:
        raise SystemExit("parent run: its description does not show Table 3's rows (GRPO, Cold start)")
    shot(driver, shots, "parent_run.png")
    print(f"ok: parent run {parents[0]['info']['run_name']}: the description shows Table 3")


def check_models(driver, url: str, shots: Path | None) -> str:
    """3: the Models page shows the registered model's champion tag. Returns the model's name."""
    models = api(url, "registered-models/search", query={"max_results": 100}).get("registered_models", [])
    tagged = [
        (m["name"], tags({"data": m})[views.CHAMPION_TAG]) for m in models if views.CHAMPION_TAG in tags({"data": m})
    ]
    if not tagged:
        raise SystemExit(f"no registered model carries the '{views.CHAMPION_TAG}' tag: run `agentr1 track`")
    body = open_page(driver, url, "#/models", tagged[0][0])
    for name, text in tagged:
        if text not in body:
            raise SystemExit(f"Models page: {name}'s champion '{text}' is not shown without a click")
    shot(driver, shots, "models.png")
    print(f"ok: Models page shows {'; '.join(f'{n} champion {t}' for n, t in tagged)}")
    return tagged[0][0]


def champion_of(url: str, model: str) -> dict:
    """The model version that registered model ``model``'s ``champion`` alias points at (REST)."""
    return api(url, "registered-models/alias", query={"name": model, "alias": "champion"})["model_version"]


def check_version(driver, url: str, model: str, shots: Path | None) -> None:
    """3 (cont.): the champion version's page shows its description: the train@ run its weights come
    from, the data it was judged on and the gate's verdict."""
    champion = champion_of(url, model)
    version = champion["version"]
    body = open_page(driver, url, f"#/models/{urllib.parse.quote(model)}/versions/{version}", "judged on")
    missing = [k for k in ("weights from", "judged on", "verdict: promote") if k not in body]
    if missing:
        raise SystemExit(f"{model} version {version}: the description lacks {missing}; the page read:\n{body[:800]}")
    shot(driver, shots, "version.png")
    verdict = next(line for line in body.splitlines() if line.startswith("verdict:"))
    print(f"ok: {model} version {version} names its train@ run, its data and '{verdict[:90]}'")


def check_trace(driver, url: str, exp_id: str, model: str, shots: Path | None) -> None:
    """4: the champion's episode opens from its link: question and spans shown."""
    champion = champion_of(url, model)
    policy = tags({"data": champion})[VARIANT_TAG]
    found = []
    for right in (" AND tags.`agentr1.em` = '1.0'", ""):  # as agentr1 track picks: a right answer first
        query = {"experiment_ids": exp_id, "filter": f"tags.`agentr1.policy` = '{policy}'{right}", "max_results": 1}
        found = found or api(url, "traces", query=query).get("traces", [])
    if not found:
        raise SystemExit(f"no trace of the champion's policy {policy}: its evaluation logged none")
    trace_id = found[0].get("request_id") or found[0]["trace_id"]
    body = open_page(driver, url, views.trace_path(exp_id, trace_id), "episode ")
    if "question" not in body:
        raise SystemExit(f"trace {trace_id} of {policy}: the episode's inputs (question) are not shown")
    shot(driver, shots, "trace.png")
    print(f"ok: trace {trace_id} of the champion {policy} opens from its link")


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
        exp_id = exp["experiment_id"]
        if args.shots:
            args.shots.mkdir(parents=True, exist_ok=True)
        check_rl_view(driver, url, exp_id, args.shots)
        check_parent(driver, url, exp_id, args.shots)
        model = check_models(driver, url, args.shots)
        check_version(driver, url, model, args.shots)
        check_trace(driver, url, exp_id, model, args.shots)
        a, b = two_train_runs(url, exp_id)
        check_compare(driver, url, exp_id, a, b, args.shots)
    finally:
        driver.quit()
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())

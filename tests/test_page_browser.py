"""The explorer page in a real headless Chromium (the system's chromium and chromedriver, driven by
selenium): it loads, the typed words are drawn coloured by the server's probabilities, hovering a word
shows the model's top alternatives, the next-word bars and the nearest words and feature map appear.
Skips, saying why, only where no browser can be had."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from nnlm.lm import LOG10_E
from nnlm.loading import load
from nnlm.serve.api import served_models
from nnlm.serve.server import ModelServer
from nnlm.use import next_words, score_words

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("no Chromium and chromedriver on PATH (apt-get install chromium chromium-driver; .ci/run does)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1000,1000"):
        options.add_argument(flag)
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except Exception as exc:  # a browser that is installed but cannot start here
        pytest.skip(f"Chromium did not start: {str(exc).splitlines()[0]}")
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def page(neural_run):
    srv = ModelServer(served_models([str(neural_run[0])], timeout=20)).start()
    yield srv.url, load(neural_run[0])
    srv.stop()


def test_typing_draws_coloured_words_alternatives_bars_and_features(browser, page):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, model = page
    wait = WebDriverWait(browser, 20)
    browser.get(url)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    text = "w1 w2 w3 w4"
    browser.find_element(By.ID, "text").send_keys(text)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#scored .word")) == 5)
    spans = browser.find_elements(By.CSS_SELECTOR, "#scored .word")
    assert [s.text for s in spans] == [*text.split(), "<p>"]
    drawn = [float(s.get_attribute("data-log10")) for s in spans]
    assert np.allclose(drawn, score_words(model, text) * LOG10_E, atol=1e-4)
    colours = [s.value_of_css_property("background-color") for s in spans]
    assert all(c.startswith("rgb") and c != "rgba(0, 0, 0, 0)" for c in colours)
    best, worst = int(np.argmax(drawn)), int(np.argmin(drawn))
    if drawn[best] - drawn[worst] > 0.5:  # a clearly more probable word is drawn greener than a less probable one
        green = [int(v) for v in colours[best][colours[best].index("(") + 1:-1].split(",")[:3]]
        red = [int(v) for v in colours[worst][colours[worst].index("(") + 1:-1].split(",")[:3]]
        assert green[1] - green[0] > red[1] - red[0]

    ActionChains(browser).move_to_element(spans[1]).perform()
    wait.until(lambda d: d.find_element(By.ID, "tip").is_displayed())
    alternatives = [e.text.split()[0] for e in browser.find_elements(By.CSS_SELECTOR, "#tip .alternative")]
    assert alternatives == [w for w, _ in next_words(model, "w1", 5)]

    bars = browser.find_elements(By.CSS_SELECTOR, "#next .bar")
    labels = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#next .label")]
    assert labels == [w for w, _ in next_words(model, text, 10)]
    widths = [b.size["width"] for b in bars]
    assert len(widths) == 10 and widths == sorted(widths, reverse=True) and widths[0] > widths[-1] > 0

    assert browser.find_element(By.ID, "features-section").is_displayed()
    wait.until(lambda d: d.find_element(By.ID, "map").get_attribute("data-words"))
    painted = browser.execute_script(
        "const c = document.getElementById('map'); const d = c.getContext('2d').getImageData(0, 0, c.width, "
        "c.height).data; let n = 0; for (let i = 3; i < d.length; i += 4) n += d[i] > 0; return n;")
    assert painted > 500  # points and labels were drawn
    browser.find_element(By.ID, "word").send_keys("w1")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#neighbors li")) == 10)
    assert browser.find_element(By.ID, "error").text == ""

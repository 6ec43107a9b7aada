"""docs/explorer.png: the explorer page of `nnlm serve MODEL` in headless Chromium, with a sentence typed,
a word hovered and a neighbor list shown (the system's chromium and chromedriver, selenium).

    NLTK_DATA=../shared/nltk_data PYTHONPATH=src python benchmarks/page_screenshot.py RUN_DIR [--out docs/explorer.png]
"""
from __future__ import annotations

import argparse
import shutil

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from nnlm.serve.api import served_models
from nnlm.serve.server import ModelServer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a neural run directory (the map and neighbors need word features)")
    ap.add_argument("--out", default="docs/explorer.png", help="PNG to write (default docs/explorer.png)")
    ap.add_argument("--text", default="the committee said that the new law would be passed next year .",
                    help="the text typed (default: a sentence)")
    ap.add_argument("--word", default="year", help="the word whose neighbors are shown (default year)")
    args = ap.parse_args()
    srv = ModelServer(served_models([args.model], timeout=60)).start()
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=900,1250",
                 "--force-device-scale-factor=1"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(srv.url)
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
        driver.find_element(By.ID, "word").send_keys(args.word)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#neighbors li"))
        driver.find_element(By.ID, "text").send_keys(args.text)
        count = len(args.text.split()) + 1
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#scored .word")) == count)
        ActionChains(driver).move_to_element(driver.find_elements(By.CSS_SELECTOR, "#scored .word")[5]).perform()
        wait.until(lambda d: d.find_element(By.ID, "tip").is_displayed())
        driver.save_screenshot(args.out)
    finally:
        driver.quit()
        srv.stop()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

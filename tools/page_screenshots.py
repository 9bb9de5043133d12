r"""Screenshots of the web page's five tools, each after one use, from a running server.

    python -m agentic_jax.serve --workdir=RUN --port=8765 &
    python tools/page_screenshots.py --url=http://127.0.0.1:8765 --out=docs/screenshots

Needs selenium and a Chromium with its driver (Debian: apt-get install chromium
chromium-driver). Writes solve.png, grade.png, derivation.png, plot.png and practice.png.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

HOMEWORK = "question,answer,student_answer\nWhat is 6*7?,42,42\nSolve x+2=5,3,7\n"


def _driver() -> webdriver.Chrome:
    browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                    "google-chrome"))), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        raise SystemExit("error: needs chromium and chromedriver on PATH")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,800"):
        options.add_argument(arg)
    return webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver),
                            options=options)


def _use(driver, wait, tool: str, homework: str) -> None:
    """Opens ``tool``'s tab, runs it once and waits for what it shows."""
    driver.find_element(By.CSS_SELECTOR, f'#tabs button[data-tab="{tool}"]').click()
    if tool == "solve":
        driver.find_element(By.ID, "solve-go").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#solve-out div.muted"))
    elif tool == "grade":
        driver.find_element(By.ID, "grade-file").send_keys(homework)
        driver.find_element(By.ID, "grade-go").click()
        wait.until(lambda d: d.find_element(By.ID, "grade-dl").is_displayed())
    elif tool == "derivation":
        driver.find_element(By.ID, "der-go").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#der-table caption"))
    elif tool == "plot":
        driver.find_element(By.ID, "plot-go").click()
        image = driver.find_element(By.ID, "plot-img")
        wait.until(lambda d: d.execute_script("return arguments[0].naturalWidth", image) > 0)
    else:
        driver.find_element(By.ID, "pr-next").click()
        wait.until(lambda d: d.find_element(By.ID, "pr-question").text.startswith("["))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--out", default="docs/screenshots")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        homework = os.path.join(tmp, "homework.csv")
        with open(homework, "w") as f:
            f.write(HOMEWORK)
        driver = _driver()
        try:
            driver.get(args.url.rstrip("/") + "/")
            wait = WebDriverWait(driver, 300)
            for tool in ("solve", "grade", "derivation", "plot", "practice"):
                _use(driver, wait, tool, homework)
                path = os.path.join(args.out, f"{tool}.png")
                driver.save_screenshot(path)
                print(path)
        finally:
            driver.quit()


if __name__ == "__main__":
    main()

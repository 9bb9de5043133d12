"""The web page in a real headless Chromium (Debian's chromium + chromium-driver, driven by
Selenium) against a live server: one test per tool, each clicking through it as a person would
and reading what the page then shows."""

import pytest

from agentic_jax.serve import ServeLimits
from tests.serve.serve_testing import chromium, live_server

if chromium() is None:
    pytest.skip("needs selenium, a chromium browser and chromedriver "
                "(pip install selenium; apt-get install chromium chromium-driver)",
                allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

BROWSER, DRIVER = chromium()


@pytest.fixture(scope="module")
def page(tiny_policy):
    """(driver, wait) on the page of a live server."""
    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1200,900"):
        options.add_argument(arg)
    with live_server(tiny_policy, ServeLimits(batch_wait_ms=0)) as (url, _):
        driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER),
                                  options=options)
        try:
            driver.get(url + "/")
            yield driver, WebDriverWait(driver, 120)
        finally:
            driver.quit()


def _tab(driver, name):
    driver.find_element(By.CSS_SELECTOR, f'#tabs button[data-tab="{name}"]').click()
    assert driver.find_element(By.ID, name).is_displayed()


def _fill(driver, element_id, text):
    box = driver.find_element(By.ID, element_id)
    box.clear()
    box.send_keys(text)


def test_solve_streams_a_transcript(page):
    driver, wait = page
    _tab(driver, "solve")
    _fill(driver, "solve-q", "What is 2 + 3?")
    _fill(driver, "solve-m", "20")
    driver.find_element(By.ID, "solve-go").click()
    finished = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#solve-out div.muted"))
    assert finished[-1].text.startswith("finished: ")
    assert driver.find_element(By.ID, "solve-err").text == ""
    assert driver.find_element(By.ID, "model").text        # /v1/models filled the header


def test_grade_uploads_a_file_and_offers_the_csv(page, tmp_path):
    driver, wait = page
    _tab(driver, "grade")
    homework = tmp_path / "hw.csv"
    homework.write_text("question,answer,student_answer\nq,2,2\nq,2,3\n")
    driver.find_element(By.ID, "grade-file").send_keys(str(homework))
    driver.find_element(By.ID, "grade-go").click()
    wait.until(lambda d: d.find_element(By.ID, "grade-dl").is_displayed())
    rows = driver.find_elements(By.CSS_SELECTOR, "#grade-table tr")
    assert len(rows) == 3                                   # the header and two rows
    verdicts = [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows[1:]]
    assert verdicts == ["correct", "incorrect"]
    assert driver.find_element(By.ID, "grade-dl").get_attribute("href").startswith("blob:")


def test_derivation_marks_the_first_invalid_step(page):
    driver, wait = page
    _tab(driver, "derivation")
    _fill(driver, "der-text", "(x+1)^2\n= x^2 + 2x + 1\n= x^2 + 1")
    driver.find_element(By.ID, "der-go").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#der-table caption"))
    statuses = [td.text for td in driver.find_elements(By.CSS_SELECTOR,
                                                       "#der-table tr td:nth-child(2)")]
    assert statuses == ["", "✓", "✗"]
    first = driver.find_element(By.CSS_SELECTOR, "#der-table tr.first")
    assert "x^2 + 1" in first.text


def test_plot_shows_a_rendered_png(page):
    driver, wait = page
    _tab(driver, "plot")
    _fill(driver, "plot-text", "x^2; y = \\sin(x)")
    driver.find_element(By.ID, "plot-go").click()
    image = driver.find_element(By.ID, "plot-img")
    wait.until(lambda d: d.execute_script("return arguments[0].naturalWidth", image) > 0)
    assert driver.execute_script("return arguments[0].naturalWidth", image) == 600
    assert image.size["width"] > 0 and image.size["height"] > 0     # laid out on the page
    assert driver.find_element(By.ID, "plot-err").text == ""


def test_practice_gives_a_problem_and_grades_the_answer(page):
    driver, wait = page
    _tab(driver, "practice")
    _fill(driver, "pr-learner", "browser")
    driver.find_element(By.ID, "pr-next").click()
    wait.until(lambda d: d.find_element(By.ID, "pr-question").text.startswith("[arithmetic"))
    _fill(driver, "pr-answer", "no idea")
    driver.find_element(By.ID, "pr-go").click()
    feedback = wait.until(lambda d: d.find_element(By.ID, "pr-feedback").text)
    assert feedback.startswith("wrong: the answer is")
    assert "answered 1" in driver.find_element(By.ID, "pr-progress").text

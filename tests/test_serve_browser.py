"""The page in a real browser: Debian's headless chromium, driven by Selenium through chromium-driver.

Ask and open a citation, see a refusal, load a shared `?q=` link, and a chunk holding
`<script>` and `<img onerror=...>` that must show as text and run nothing.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from urllib.parse import urlencode

import pytest
from corpora import TINY, build_index
from serving import Server, serving

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import screenshot

pytestmark = [pytest.mark.serve, pytest.mark.browser]

why = screenshot.missing()
if why and os.environ.get("CI"):
    pytest.fail(f"CI must run the browser tests: {why}", pytrace=False)
if why:
    pytest.skip(why, allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support import expected_conditions as ready  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

# HTML in prose reads as its text (ragline.markup): in code, a chunk holds it as written, and so the page gets it.
HOSTILE = (
    """# Hostile

## Payload notes

The payload notes quote `<script>window.pwned = 1</script>` as an example of markup.

The payload notes also quote `<img src="x" onerror="window.pwned = 2">` as an image.

## Dump token

The dump token is """
    + "9f" * 3000
    + """ in full.
"""
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Server:
    base = tmp_path_factory.mktemp("page")
    with serving(build_index(base, TINY | {"hostile": HOSTILE}), "--quiet") as s:
        yield s


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    b = screenshot.driver(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.quit()


def result_title(browser, text: str) -> None:
    WebDriverWait(browser, 30).until(ready.text_to_be_present_in_element((By.ID, "result-title"), text))


def has_focus(browser, element) -> None:
    """Wait until `element` has the focus. `autofocus` is applied at a rendering update after the page has
    loaded, which a busy machine puts off: the focus on load was asserted at once and failed under load."""
    WebDriverWait(browser, 30).until(lambda b: b.switch_to.active_element == element, f"{element.get_attribute('id')} never got the focus")


def test_ask_see_the_answer_and_open_a_citation(server: Server, browser) -> None:
    browser.get(server.url + "/")
    box = browser.find_element(By.ID, "q")
    has_focus(browser, box)  # the question box has the focus on load
    assert browser.find_element(By.CSS_SELECTOR, "label[for=q]").text == "Question"
    box.send_keys("When does the nightly sweep run?", Keys.ENTER)
    result_title(browser, "Answer")
    assert browser.switch_to.active_element.get_attribute("id") == "result-title"  # focus moves to the result
    answer = browser.find_element(By.CSS_SELECTOR, ".answer").text
    assert "23:40" in answer and "[1]" in answer
    source = browser.find_element(By.ID, "src-1")
    assert source.get_attribute("open") is None
    browser.find_element(By.CSS_SELECTOR, "a.cite[data-n='1']").click()
    assert source.get_attribute("open") is not None
    summary = source.find_element(By.TAG_NAME, "summary")
    assert browser.switch_to.active_element == summary
    assert "Settlement > The nightly sweep" in summary.text and re.search(r"settlement\.md:\d+-\d+$", summary.text)
    assert "The sweep runs once a day at 23:40 IST" in source.find_element(By.CSS_SELECTOR, "pre.chunk").text
    assert "q=When+does+the+nightly+sweep+run" in browser.current_url


def test_a_refusal_shows_as_a_refusal(server: Server, browser) -> None:
    browser.get(server.url + "/")
    browser.find_element(By.ID, "q").send_keys("Can customers pay with Apple Pay?", Keys.ENTER)
    result_title(browser, "No answer")
    assert browser.find_element(By.CSS_SELECTOR, ".refusal").text == "I could not find that in the handbook."
    meta = browser.find_element(By.CSS_SELECTOR, "#result .meta").text
    assert meta == "confidence 0.00 · threshold 0.23"
    assert "under the abstain threshold" in browser.find_element(By.CSS_SELECTOR, ".reason").text
    assert not browser.find_elements(By.CSS_SELECTOR, "a.cite")


def test_a_shared_link_asks_by_itself(server: Server, browser) -> None:
    browser.get(server.url + "/?" + urlencode({"q": "NW-4021", "view": "search"}))
    result_title(browser, "Search: ")
    assert browser.find_element(By.ID, "q").get_attribute("value") == "NW-4021"
    assert browser.find_element(By.CSS_SELECTOR, "input[value=search]").is_selected()
    first = browser.find_element(By.CSS_SELECTOR, ".hits li")
    assert "Error codes > Client errors" in first.text and "errors.md:" in first.text
    first.find_element(By.TAG_NAME, "summary").click()
    assert "bm25" in first.find_element(By.CSS_SELECTOR, ".signals").text
    browser.get(server.url + "/?" + urlencode({"q": "When does the nightly sweep run?"}))
    result_title(browser, "Answer")
    assert "23:40" in browser.find_element(By.CSS_SELECTOR, ".answer").text


@pytest.mark.parametrize("view", ["search", "answer"])
def test_hostile_chunk_text_shows_as_text_and_runs_nothing(server: Server, browser, view: str) -> None:
    browser.get(server.url + "/?" + urlencode({"q": "payload notes quote markup image", "view": view}))
    result_title(browser, "Search: " if view == "search" else "Answer")
    shown = browser.find_element(By.ID, "result").get_attribute("textContent")
    assert "<script>window.pwned = 1</script>" in shown or '<img src="x" onerror="window.pwned = 2">' in shown
    assert not browser.find_elements(By.CSS_SELECTOR, "#result img, #result script")
    assert browser.execute_script("return typeof window.pwned") == "undefined"


@pytest.mark.parametrize("view", ["search", "answer"])
def test_one_long_token_wraps_instead_of_widening_the_page(server: Server, browser, view: str) -> None:
    """A 6,000-character token in an answer or a hit wraps: the page is no wider than the window (it was 75,803 px)."""
    browser.get(server.url + "/?" + urlencode({"q": "What is the dump token?", "view": view}))
    result_title(browser, "Search: " if view == "search" else "Answer")
    assert "9f9f9f" in browser.find_element(By.ID, "result").get_attribute("textContent")
    wide, window = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert wide <= window, f"the page is {wide} px wide in a {window} px window"


def test_a_busy_server_is_asked_again_after_its_retry_after(browser) -> None:
    """Issue 40, item 12: the page honours a 429's Retry-After, asking again instead of showing the
    refusal. A stand-in server (the page's own HTML) answers the first POST /answer with 429 and
    `Retry-After: 1`, the next with an answer."""
    import http.server
    import json
    import threading

    from ragline import page as servepage

    record = {
        "question": "When does the sweep run?",
        "answer": "The sweep runs at 23:40 IST [1].",
        "refused": False,
        "reason": None,
        "confidence": 0.9,
        "generator": {"threshold": 0.2},
        "citations": [{"n": 1, "rank": 1, "doc": "settlement", "headings": ["Settlement"], "path": "s.md", "start_line": 1, "end_line": 2}],
        "hits": [{"text": "The sweep runs at 23:40 IST."}],
        "ms": 1,
    }
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def reply(self, code: int, kind: str, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            for name, value in {"Content-Type": kind, "Content-Length": str(len(body)), **(headers or {})}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self.reply(200, "text/html; charset=utf-8", servepage.PAGE.encode())

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            asked.append(self.path)
            if len(asked) == 1:
                self.reply(429, "application/json", b'{"error": "busy: try again"}', {"Retry-After": "1"})
            else:
                self.reply(200, "application/json", json.dumps(record).encode())

        def log_message(self, *args: object) -> None:
            pass

    stand_in = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=stand_in.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://127.0.0.1:{stand_in.server_address[1]}/?" + urlencode({"q": record["question"]}))
        result_title(browser, "Answer")
        assert "23:40 IST" in browser.find_element(By.ID, "result").text
        assert asked == ["/answer", "/answer"]
    finally:
        stand_in.shutdown()
        stand_in.server_close()

"""The picture of the page in the README and docs/service.md: rag-serve on build/idx, headless Chromium asking a Northwind question.

    python3 scripts/screenshot.py            # results/serve-page.png (`just screenshot`)

Drives Debian's chromium through its chromium-driver with Selenium (no browser is
downloaded); `driver()` is also what tests/test_serve_browser.py uses. The page
answers, the first citation is opened, and the window is saved as a PNG.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Headless with nothing reaching for the network: without these, chromium waits on services it cannot reach.
ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
QUESTION = "When does the settlement sweep run?"


def missing() -> str | None:
    """Why the browser cannot run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            return f"{path} is absent (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[serve-test]')"
    return None


def driver(profile: Path, width: int = 1000, height: int = 1000) -> Any:
    """A headless Chromium WebDriver on a fresh profile folder."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (*ARGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(arg)
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    browser.set_page_load_timeout(30)
    return browser


def main() -> int:
    why = missing()
    if why:
        print(f"screenshot: {why}", file=sys.stderr)
        return 1
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    out = ROOT / "results" / "serve-page.png"
    bin_dir = Path(sys.executable).parent
    serve = str(bin_dir / "rag-serve") if (bin_dir / "rag-serve").exists() else "rag-serve"
    log = tempfile.TemporaryFile()  # noqa: SIM115 - the server writes to it until the end
    proc = subprocess.Popen([serve, "--index", str(ROOT / "build" / "idx"), "--port", "0", "--quiet"], stderr=log, cwd=ROOT)
    profile = Path(tempfile.mkdtemp(prefix="ragline-chromium-"))
    try:
        url = None
        for _ in range(600):
            log.seek(0)
            if m := re.search(rb"at (http://\S+)/", log.read()):
                url = m.group(1).decode()
                break
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        if url is None:
            log.seek(0)
            print(f"screenshot: rag-serve did not start: {log.read().decode(errors='replace').strip()}", file=sys.stderr)
            return 1
        browser = driver(profile, 1000, 1050)
        try:
            browser.get(f"{url}/?{urlencode({'q': QUESTION})}")
            wait = WebDriverWait(browser, 60)
            wait.until(ready.text_to_be_present_in_element((By.ID, "result-title"), "Answer"))
            browser.find_element(By.CSS_SELECTOR, "a.cite").click()
            wait.until(lambda b: b.find_element(By.ID, "src-1").get_attribute("open") is not None)
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(".png.tmp")
            tmp.write_bytes(browser.get_screenshot_as_png())
            tmp.replace(out)
        finally:
            browser.quit()
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(profile, ignore_errors=True)
    print(f"screenshot: wrote {out.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

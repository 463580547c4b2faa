"""The search page in headless Chromium: typing a query shows the API's hits; ``/?q=`` prefills.

Chromium is driven over the DevTools protocol on ``--remote-debugging-pipe`` (NUL-separated
JSON on file descriptors 3 and 4), so no webdriver or websocket package is needed. Skipped
where no Chromium or Chrome is installed (``apt-get install chromium``; ``.ci/run`` installs it when it can
and then sets ``RETRIEVER_REQUIRE_BROWSER`` so the tests fail rather than skip).
"""
from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
import urllib.parse

import pytest

from serving_fixtures import SHORT_QUERY_TOKENS, served, short_query_server  # noqa: F401

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars")
SCREENSHOT = "/tmp/retriever-search-page.png"


def find_browser() -> str:
    found = os.environ.get("CHROMIUM") or next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if not found:
        message = "no Chromium or Chrome on PATH (install one, e.g. apt-get install chromium)"
        if os.environ.get("RETRIEVER_REQUIRE_BROWSER"):  # set by .ci/run once it has installed one
            pytest.fail(message)
        pytest.skip(message)
    return found


class DevTools:
    """A minimal DevTools-protocol client over Chromium's debugging pipe."""

    def __init__(self, binary: str, profile: str) -> None:
        # The shell moves our stdin/stdout pipes to fds 3 and 4, where --remote-debugging-pipe expects them.
        self.process = subprocess.Popen(
            ["sh", "-c", 'exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null', binary, *FLAGS,
             "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buffer = b""
        self.next_id = 0
        self.session: str | None = None

    def send(self, method: str, params: dict | None = None, timeout: float = 20.0) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session:
            message["sessionId"] = self.session
        self.process.stdin.write(json.dumps(message).encode() + b"\0")
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.process.stdout], [], [], remaining)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self.process.stdout.fileno(), 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium exited")
            self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)

    def open_page(self, width: int = 1000, height: int = 860) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError(f"waited {timeout}s for {expression}")

    def type_text(self, text: str) -> None:
        for char in text:
            self.send("Input.dispatchKeyEvent", {"type": "keyDown", "key": char, "text": char})
            self.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": char})

    def press_enter(self) -> None:
        keys = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}
        self.send("Input.dispatchKeyEvent", {"type": "keyDown", "text": "\r", **keys})
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", **keys})

    def close(self) -> None:
        try:
            self.session = None
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture()
def browser(tmp_path):
    tools = DevTools(find_browser(), str(tmp_path / "profile"))
    try:
        tools.open_page()
        yield tools
    finally:
        tools.close()


SHOWN_HITS = """JSON.stringify([...document.querySelectorAll('#results .hit')].map(item => ({
  id: item.dataset.id, title: item.querySelector('.title').textContent,
  score: item.querySelector('.score').textContent, snippet: item.querySelector('.snippet').textContent})))"""


def expected_hits(served, query: str, k: int = 10) -> list:
    return served.searchers["tiny"].search([query], k=k)[0]


def test_typed_query_shows_title_snippet_score_and_id(served, browser):
    browser.send("Page.navigate", {"url": served.url})
    browser.wait_for("['ready', 'done'].includes(document.body.dataset.state)")
    browser.evaluate("document.getElementById('q').focus()")
    browser.type_text("where does honey come from")
    assert browser.evaluate("document.getElementById('q').value") == "where does honey come from"
    browser.press_enter()
    browser.wait_for("document.body.dataset.state === 'done'")
    shown = json.loads(browser.evaluate(SHOWN_HITS))
    expected = expected_hits(served, "where does honey come from")
    assert [h["id"] for h in shown] == [h.id for h in expected]
    assert shown[0]["title"] == expected[0].title
    assert shown[0]["score"] == f"score {expected[0].score:.4f}"
    assert shown[0]["snippet"] == " ".join(expected[0].text.split())
    assert browser.evaluate("location.search") == "?q=where+does+honey+come+from&k=10"
    assert "10 hits from tiny" in browser.evaluate("document.getElementById('status').textContent")
    png = base64.b64decode(browser.send("Page.captureScreenshot", {"format": "png"})["data"])
    assert png.startswith(b"\x89PNG")
    with open(SCREENSHOT, "wb") as file:
        file.write(png)


def test_url_query_prefills_and_searches_another_index(served, browser):
    browser.send("Page.navigate", {"url": served.url + "?q=ice+and+snow&k=3&index=small"})
    browser.wait_for("document.body.dataset.state === 'done'")
    shown = json.loads(browser.evaluate(SHOWN_HITS))
    expected = served.searchers["small"].search(["ice and snow"], k=3)[0]
    assert [h["id"] for h in shown] == [h.id for h in expected]
    assert browser.evaluate("document.getElementById('q').value") == "ice and snow"
    assert browser.evaluate("document.getElementById('index-label').hidden") is False


def test_the_mode_switch_follows_the_index_picked(served, browser):
    searcher = served.searchers["small"]
    lexical, searcher.lexical = searcher.lexical, None  # "small" now offers dense only
    disabled = "JSON.stringify([...document.getElementById('mode').options].filter(o => o.disabled).map(o => o.value))"
    try:
        browser.send("Page.navigate", {"url": served.url + "?index=small"})
        browser.wait_for("['ready', 'done'].includes(document.body.dataset.state)")
        assert json.loads(browser.evaluate(disabled)) == ["bm25", "hybrid"]
        browser.evaluate("const s = document.getElementById('index'); s.value = 'tiny'; "
                         "s.dispatchEvent(new Event('change'))")
        assert json.loads(browser.evaluate(disabled)) == []
    finally:
        searcher.lexical = lexical


def test_errors_show_on_the_page(served, browser):
    browser.send("Page.navigate", {"url": served.url + "?q=" + "x" * 201})
    browser.wait_for("document.body.dataset.state === 'error'")
    assert "limit is 200" in browser.evaluate("document.getElementById('status').textContent")


def test_a_reply_that_is_not_json_or_no_reply_is_named_on_the_page(served, browser):
    """A proxy's HTML 502 showed "Error: Unexpected token '<', ... is not valid JSON", a server gone "Failed to
    fetch"; the page now names the status or says the server did not answer."""
    status = "document.getElementById('status').textContent"
    search = "document.getElementById('q').value = 'bee'; document.getElementById('form').requestSubmit()"
    browser.send("Page.navigate", {"url": served.url})
    browser.wait_for("['ready', 'done'].includes(document.body.dataset.state)")
    browser.evaluate("window.fetch = async () => new Response('<html><h1>502 Bad Gateway</h1></html>', "
                     "{status: 502, statusText: 'Bad Gateway', headers: {'content-type': 'text/html'}})")
    browser.evaluate(search)
    browser.wait_for("document.body.dataset.state === 'error'")
    assert browser.evaluate(status).startswith("Error: HTTP 502 Bad Gateway, with a reply that is not the server's JSON")
    browser.evaluate("document.body.dataset.state = 'ready'; window.fetch = async () => { throw new TypeError("
                     "'Failed to fetch'); }")
    browser.evaluate(search)
    browser.wait_for("document.body.dataset.state === 'error'")
    assert browser.evaluate(status) == "Error: the server did not answer (Failed to fetch); is it still running?"


def test_a_query_cut_at_the_query_max_length_says_so_on_the_page(short_query_server, browser):
    port, _ = short_query_server
    status = "document.getElementById('status').textContent"
    browser.send("Page.navigate", {"url": f"http://127.0.0.1:{port}/?q=the+cat+sat+on+the+old+mat+by+the+fire"})
    browser.wait_for("document.body.dataset.state === 'done'")
    assert f"longer than the index's {SHORT_QUERY_TOKENS} tokens: only its beginning" in browser.evaluate(status)
    browser.send("Page.navigate", {"url": f"http://127.0.0.1:{port}/?q=hot+lava"})
    browser.wait_for("document.body.dataset.state === 'done'")
    assert "tokens" not in browser.evaluate(status)


def test_dump_dom_of_a_linked_search(served, tmp_path):
    query = "hot lava rock"
    url = served.url + "?" + urllib.parse.urlencode({"q": query, "k": 4})
    result = subprocess.run([find_browser(), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                             "--virtual-time-budget=15000", url], capture_output=True, text=True, timeout=60)
    ids = [h.id for h in expected_hits(served, query, k=4)]
    positions = [result.stdout.find(f'data-id="{doc_id}"') for doc_id in ids]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), result.stdout[-2000:]
    assert "4 hits from tiny" in result.stdout


HTML_DOCS = [{"_id": "h1", "title": "<b>Bees</b> & <i>honey</i>",
              "text": "<img src=x onerror=\"window.injected=1\"><script>window.injected=2</script> the bee makes honey"},
             {"_id": "h2", "title": "Lava", "text": "lava from the volcano is hot rock"}]


@pytest.fixture()
def one_index_server(tmp_path, tiny_model_dir):
    """A server with a single index whose documents contain HTML."""
    from fixtures_corpora import write_jsonl
    from fixtures_indexes import build_flat_index
    from serving_fixtures import BATCHING, LIMITS, ServerThread

    from retriever.searching import Searcher
    from retriever.serving import create_app

    corpus = write_jsonl(tmp_path / "corpus.jsonl", HTML_DOCS)
    searcher = Searcher(build_flat_index(corpus, tmp_path / "html", tiny_model_dir), device="cpu", dtype="fp32")
    server = ServerThread(create_app({"html": searcher}, LIMITS, BATCHING)).start()
    yield f"http://127.0.0.1:{server.port}/", searcher
    server.stop()


def test_one_index_hides_the_selector_and_document_html_is_shown_as_text(one_index_server, browser):
    url, searcher = one_index_server
    browser.send("Page.navigate", {"url": url + "?q=bee+honey&k=2"})
    browser.wait_for("document.body.dataset.state === 'done'")
    assert browser.evaluate("document.getElementById('index-label').hidden") is True
    assert browser.evaluate("getComputedStyle(document.getElementById('index-label')).display") == "none"
    shown = json.loads(browser.evaluate(SHOWN_HITS))
    assert [h["id"] for h in shown] == [h.id for h in searcher.search(["bee honey"], k=2)[0]]
    bees = next(h for h in shown if h["id"] == "h1")
    assert bees["title"] == "<b>Bees</b> & <i>honey</i>" and "<script>window.injected=2</script>" in bees["snippet"]
    assert browser.evaluate("document.querySelectorAll('#results img, #results script, #results b').length") == 0
    assert browser.evaluate("window.injected === undefined") is True


BIDI_DOCS = [{"_id": "r\u202e1", "title": "\u202eevil title", "text": "\u202ethe bee makes honey " * 30},
             {"_id": "r2", "title": "\u05d3\u05d1\u05d5\u05e8\u05d4!", "text": "\u05d3\u05d1\u05e9 honey bee"}]
BOXES = """JSON.stringify([...document.querySelectorAll('#results .hit')].map(item => {
  const edges = (node) => { const range = document.createRange(); range.selectNodeContents(node);
                            return [range.getBoundingClientRect().right, node.getBoundingClientRect().right]; };
  return {id: item.querySelector('.id').getBoundingClientRect().right,
          score: item.querySelector('.score').getBoundingClientRect().left,
          title: edges(item.querySelector('.title')), snippet: edges(item.querySelector('.snippet')),
          rtl: /[\u0590-\u05ff]/.test(item.querySelector('.title').textContent)};
}))"""


def _on_a_page_searching(tmp_path, tiny_model_dir, browser, docs: list[dict], expression: str):
    """``expression``'s JSON value on the page of a server holding ``docs`` alone, once it shows the hits of
    'bee honey' (k=2)."""
    from fixtures_corpora import write_jsonl
    from fixtures_indexes import build_flat_index
    from serving_fixtures import BATCHING, LIMITS, ServerThread

    from retriever.searching import Searcher
    from retriever.serving import create_app

    corpus = write_jsonl(tmp_path / "corpus.jsonl", docs)
    searcher = Searcher(build_flat_index(corpus, tmp_path / "index", tiny_model_dir), device="cpu", dtype="fp32")
    server = ServerThread(create_app({"docs": searcher}, LIMITS, BATCHING)).start()
    try:
        browser.send("Page.navigate", {"url": f"http://127.0.0.1:{server.port}/?q=bee+honey&k=2"})
        browser.wait_for("document.body.dataset.state === 'done'")
        return json.loads(browser.evaluate(expression))
    finally:
        server.stop()


def test_a_right_to_left_title_or_text_is_laid_out_right_to_left_and_isolated(tmp_path, tiny_model_dir, browser):
    """Titles and snippets were shown in the page's left-to-right direction: a Hebrew title sat at the left with its
    "!" at the wrong end. Each is its own ``dir="auto"`` element, so its own first strong letter sets its direction;
    and an id holding U+202E RIGHT-TO-LEFT OVERRIDE does not reorder the score shown after it."""
    boxes = _on_a_page_searching(tmp_path, tiny_model_dir, browser, BIDI_DOCS, BOXES)
    assert len(boxes) == 2 and all(box["score"] >= box["id"] for box in boxes), boxes  # the score stays after the id
    hebrew = next(box for box in boxes if box["rtl"])
    assert abs(hebrew["title"][0] - hebrew["title"][1]) < 1 and abs(hebrew["snippet"][0] - hebrew["snippet"][1]) < 1


def test_a_search_without_hits_says_why_on_the_page(served, browser):
    """The page said "0 hits from tiny (bm25)" and nothing more; it shows the reply's note."""
    browser.send("Page.navigate", {"url": served.url + "?q=the&mode=bm25"})
    browser.wait_for("document.body.dataset.state === 'done'")
    status = browser.evaluate("document.getElementById('status').textContent")
    assert status.startswith("0 hits from tiny (bm25)") and status.endswith(
        "\u2014 no hits: BM25 returns only passages that share a term with the query (stopwords and words under two "
        "characters are not terms)"), status


LONG_WORD_DOCS = [{"_id": "w" * 300, "title": "bee" + "x" * 2000, "text": "honey " + "ACGT" * 1500 + " bee"},
                  {"_id": "w2", "title": "honey bee", "text": "https://example.com/" + "a/" * 1000}]
OVERFLOW = """JSON.stringify({page: document.documentElement.scrollWidth - window.innerWidth,
  cards: [...document.querySelectorAll('#results .hit')].map(item => item.scrollWidth - item.clientWidth)})"""


def test_a_hit_of_very_long_words_stays_inside_its_card(tmp_path, tiny_model_dir, browser):
    """A title, passage or id holding one very long word (a URL, a DNA sequence, base64) ran out of its card and
    widened the page: thousands of pixels of sideways scrolling. Words break anywhere rather than overflow."""
    overflow = _on_a_page_searching(tmp_path, tiny_model_dir, browser, LONG_WORD_DOCS, OVERFLOW)
    assert len(overflow["cards"]) == 2 and overflow == {"page": 0, "cards": [0, 0]}, overflow


def test_a_snippet_cut_without_spaces_keeps_whole_characters(served, browser):
    """A text with no space (CJK, emoji) was cut at 299 UTF-16 code units, which can split a character beyond the
    Basic Multilingual Plane into a lone surrogate, shown as U+FFFD (session 21)."""
    browser.send("Page.navigate", {"url": served.url})
    browser.wait_for("['ready', 'done'].includes(document.body.dataset.state)")
    shown = json.loads(browser.evaluate("JSON.stringify(['\\u{1F41D}'.repeat(400), 'a' + '\\u{1F41D}'.repeat(400)]"
                                        ".map((text) => snippet(text, 300)))"))
    for text, first in zip(shown, ["\U0001F41D", "a"]):
        assert text.startswith(first) and text.endswith("\u2026") and len(text) == 300, text
        assert not any(0xD800 <= ord(character) <= 0xDFFF for character in text)


def test_a_link_naming_an_index_in_decomposed_letters_finds_it(served, browser):
    """``/?index=cafe\\u0301`` (é as e and a combining accent, as macOS writes names) said "No index named café is
    served here", though the API finds it (it takes names as NFC): the page compared the names unnormalised."""
    from serving_fixtures import BATCHING, LIMITS, ServerThread

    from retriever.serving import BatchSettings, create_app

    app = create_app({"tiny": served.searchers["tiny"], "caf\u00e9": served.searchers["small"]}, LIMITS,
                     BatchSettings(max_batch=BATCHING.max_batch, warm_up=False))
    server = ServerThread(app).start()
    try:
        browser.send("Page.navigate", {"url": f"http://127.0.0.1:{server.port}/?q=ice+and+snow&k=3&index=cafe%CC%81"})
        state = browser.wait_for("['done', 'error'].includes(document.body.dataset.state) && document.body.dataset.state")
        status = browser.evaluate("document.getElementById('status').textContent")
    finally:
        server.stop()
    assert state == "done" and status.startswith("3 hits from caf\u00e9 (dense)"), status
    assert browser.evaluate("document.getElementById('index').value") == "caf\u00e9"

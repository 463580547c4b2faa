"""Probe round 8's search-page faults, in headless Chromium: a late reply to an older search, Back and Forward,
and a link naming a mode that does not exist."""
from __future__ import annotations

import json
import threading
import time

from serving_fixtures import served  # noqa: F401 - fixtures
from test_page_browser import SHOWN_HITS, browser  # noqa: F401 - fixture

STATE = "document.body.dataset.state"
STATUS = "document.getElementById('status').textContent"


def submit(browser, query: str, index: str = "tiny") -> None:
    browser.evaluate(f"document.getElementById('index').value = {json.dumps(index)}; "
                     f"document.getElementById('q').value = {json.dumps(query)}; "
                     "document.getElementById('form').requestSubmit()")


def shown_ids(browser) -> list[str]:
    return [hit["id"] for hit in json.loads(browser.evaluate(SHOWN_HITS))]


def expected_ids(served, query: str, index: str = "tiny") -> list[str]:
    return [hit.id for hit in served.searchers[index].search([query], k=10)[0]]


def test_a_late_reply_to_an_older_search_does_not_replace_the_newer_ones_hits(served, browser, monkeypatch):
    """A slow search followed by a quick one: the slow one's hits, arriving last, replaced the quick one's under
    the newer query and address."""
    encoder, answered = served.searchers["small"].encoder, threading.Event()
    encode = encoder.encode_queries

    def slow_encode(texts, *args, **kwargs):
        if any("slow" in text for text in texts):
            time.sleep(1.5)
            answered.set()
        return encode(texts, *args, **kwargs)

    monkeypatch.setattr(encoder, "encode_queries", slow_encode)
    browser.send("Page.navigate", {"url": served.url})
    browser.wait_for(f"['ready', 'done'].includes({STATE})")
    submit(browser, "slow cat", "small")
    submit(browser, "ice and snow")
    browser.wait_for(f"{STATE} === 'done'")
    assert answered.wait(10)
    time.sleep(0.5)  # the slow reply reaches the page meanwhile
    assert shown_ids(browser) == expected_ids(served, "ice and snow")
    assert "10 hits from tiny" in browser.evaluate(STATUS)
    assert browser.evaluate("location.search") == "?q=ice+and+snow&k=10"


def wait_for_address(browser, search: str) -> None:
    browser.wait_for(f"location.search === {json.dumps(search)} && ['done', 'ready'].includes({STATE}) "
                     f"&& document.getElementById('q').value !== ''")


def test_back_and_forward_step_through_the_searches_typed(served, browser):
    """Each search replaced the address's history entry, so Back left the page instead of showing the search
    before; a linked search keeps its own entry (it is not pushed a second time)."""
    browser.send("Page.navigate", {"url": served.url + "?q=hot+lava+rock"})
    wait_for_address(browser, "?q=hot+lava+rock&k=10")
    entries = browser.evaluate("history.length")
    submit(browser, "ice and snow")
    wait_for_address(browser, "?q=ice+and+snow&k=10")
    submit(browser, "where does honey come from", "small")
    wait_for_address(browser, "?q=where+does+honey+come+from&k=10&index=small")
    assert browser.evaluate("history.length") == entries + 2
    for step, search, query, index in [("back", "?q=ice+and+snow&k=10", "ice and snow", "tiny"),
                                       ("back", "?q=hot+lava+rock&k=10", "hot lava rock", "tiny"),
                                       ("forward", "?q=ice+and+snow&k=10", "ice and snow", "tiny"),
                                       ("forward", "?q=where+does+honey+come+from&k=10&index=small",
                                        "where does honey come from", "small")]:
        browser.evaluate(f"history.{step}()")
        wait_for_address(browser, search)
        browser.wait_for(f"{STATE} === 'done'")
        assert browser.evaluate("document.getElementById('q').value") == query
        assert browser.evaluate("document.getElementById('index').value") == index
        assert shown_ids(browser) == expected_ids(served, query, index)
    assert browser.evaluate("history.length") == entries + 2


def test_a_link_naming_a_mode_that_does_not_exist_says_so(served, browser):
    """``/?q=cat&mode=hybird`` (or ``BM25``) searched in the default mode without a word; the API refuses it."""
    for mode in ("hybird", "BM25"):
        browser.send("Page.navigate", {"url": served.url + f"?q=cat&mode={mode}"})
        browser.wait_for(f"['ready', 'done', 'error'].includes({STATE})")
        assert browser.evaluate(STATE) == "error"
        assert browser.evaluate(STATUS) == f"There is no mode \u201c{mode}\u201d; pick dense, bm25 or hybrid."
        assert browser.evaluate("document.querySelectorAll('#results .hit').length") == 0

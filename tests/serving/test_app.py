"""The HTTP API against a real server: same results as `retriever search`, clean 4xx errors, batching."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner, Result

from retriever.cli import main
from retriever.cli.serving import serve_command
from retriever.errors import RetrieverError
from retriever.indexing import read_manifest
from serving_fixtures import SHORT_QUERY_TOKENS, call, served, short_query_server  # noqa: F401
from fixtures_corpora import TINY_DOCS
from fixtures_system import free_port, run_in_threads

QUERIES = ["where does honey come from", "hot lava rock", "what does the heart do", "ice and snow"]


def cli_search(index, query: str, k: int) -> list[dict]:
    result = CliRunner().invoke(main, ["search", str(index), query, "-k", str(k), "--json", "--device", "cpu",
                                       "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["hits"]


def assert_same_hits(got: list[dict], expected: list[dict]) -> None:
    assert [h["id"] for h in got] == [h["id"] for h in expected]
    assert [h["rank"] for h in got] == list(range(1, len(expected) + 1))
    for mine, theirs in zip(got, expected):
        assert mine["score"] == pytest.approx(theirs["score"], abs=1e-5)
        assert (mine["title"], mine["text"]) == (theirs["title"], theirs["text"])


def test_get_search_returns_what_the_cli_returns(served):
    for query in QUERIES[:2]:
        reply = served.get(f"/search?q={query.replace(' ', '+')}&k=5")
        assert reply.status == 200 and reply.headers["content-type"] == "application/json"
        body = reply.json()
        assert (body["index"], body["query"], body["k"]) == ("tiny", query, 5)
        assert_same_hits(body["hits"], cli_search(served.index, query, 5))


def test_post_search_matches_the_searcher(served):
    reply = served.post_json("/search", {"queries": QUERIES, "k": 3})
    assert reply.status == 200, reply.body
    expected = served.searchers["tiny"].search(QUERIES, k=3)
    results = reply.json()["results"]
    assert [r["query"] for r in results] == QUERIES
    for result, hits in zip(results, expected):
        assert_same_hits(result["hits"], [h.to_json() for h in hits])
    assert len(served.post_json("/search", {"queries": ["x"]}).json()["results"][0]["hits"]) == 10


def test_each_query_cut_at_the_query_max_length_says_so_in_its_result(short_query_server, served):
    """`search` notes a query longer than the query max length; the server cut it without a word (the limit was
    only listed in /indexes). Now each query's result has cut_at_tokens: the tokens it was cut to, or null."""
    port, searcher = short_query_server
    long, short = "the cat sat on the old mat by the fire", "hot lava"  # 12 tokens with [CLS] and [SEP]; 4
    body = call(port, "GET", "/search?q=" + long.replace(" ", "+") + "&k=3").json()
    assert body["cut_at_tokens"] == SHORT_QUERY_TOKENS and body["query"] == long
    assert_same_hits(body["hits"], [h.to_json() for h in searcher.search([long], k=3)[0]])
    assert call(port, "GET", "/search?q=hot+lava&k=3").json()["cut_at_tokens"] is None
    payload = json.dumps({"queries": [short, long, short], "k": 3}).encode()
    results = call(port, "POST", "/search", payload, {"Content-Type": "application/json"}).json()["results"]
    assert [r["cut_at_tokens"] for r in results] == [None, SHORT_QUERY_TOKENS, None]
    for result, hits in zip(results, searcher.search([short, long, short], k=3)):
        assert_same_hits(result["hits"], [h.to_json() for h in hits])
    bm25 = call(port, "GET", "/search?q=" + long.replace(" ", "+") + "&mode=bm25")
    assert bm25.status == 200 and bm25.json()["cut_at_tokens"] is None  # BM25 reads the whole query
    hybrid = call(port, "GET", "/search?q=" + long.replace(" ", "+") + "&mode=hybrid").json()
    assert hybrid["cut_at_tokens"] == SHORT_QUERY_TOKENS  # its dense half was cut
    assert served.get("/search?q=" + long.replace(" ", "+")).json()["cut_at_tokens"] is None  # 512 tokens there
    schema = served.get("/openapi.json").json()["components"]["schemas"]
    assert "cut_at_tokens" in schema["SearchResponse"]["properties"] and "cut_at_tokens" in schema["QueryResult"][
        "properties"]


def test_each_request_picks_its_mode(served):
    bm25 = served.get("/search?q=hot+volcanoes&k=3&mode=bm25").json()
    assert bm25["mode"] == "bm25" and [h["id"] for h in bm25["hits"]] == ["d4", "d3"]
    reply = served.post_json("/search", {"queries": ["hot volcanoes", "honey"], "k": 3, "mode": "hybrid"}).json()
    expected = served.searchers["tiny"].search(["hot volcanoes", "honey"], k=3, mode="hybrid")
    assert reply["mode"] == "hybrid"
    for result, hits in zip(reply["results"], expected):
        assert_same_hits(result["hits"], [h.to_json() for h in hits])
    assert served.get("/search?q=cat").json()["mode"] == "dense"
    assert served.get("/indexes").json()["indexes"][0]["modes"] == ["dense", "bm25", "hybrid"]


def test_named_indexes_answer_from_their_own_index(served):
    small_ids = {doc_id for doc_id, _, _ in TINY_DOCS[:6]}
    reply = served.get("/indexes/small/search?q=ice+and+snow&k=12")
    assert reply.status == 200
    hits = reply.json()["hits"]
    assert {h["id"] for h in hits} == small_ids
    assert_same_hits(hits, [h.to_json() for h in served.searchers["small"].search(["ice and snow"], k=12)[0]])
    posted = served.post_json("/indexes/small/search", {"queries": ["ice and snow"], "k": 12}).json()
    assert posted["index"] == "small" and posted["results"][0]["hits"] == hits
    assert served.get("/indexes/tiny/search?q=ice+and+snow&k=3").json()["hits"] == \
        served.get("/search?q=ice+and+snow&k=3").json()["hits"]


def test_health_info_and_index_list(served):
    health = served.get("/health").json()
    assert health["status"] == "ok" and set(health["indexes"]) == {"tiny", "small"}
    info = served.get("/info").json()
    assert info["manifest"] == read_manifest(served.index)
    assert (info["name"], info["documents"], info["index_type"]) == ("tiny", 12, "flat")
    assert info["encoder"]["pooling"] == "mean"
    assert served.get("/indexes/small/info").json()["documents"] == 6
    listed = served.get("/indexes").json()
    assert listed["default"] == "tiny" and [i["name"] for i in listed["indexes"]] == ["tiny", "small"]


def test_openapi_documents_every_endpoint(served):
    schema = served.get("/openapi.json").json()
    assert {"get", "post"} <= set(schema["paths"]["/search"])
    assert {"get", "post"} <= set(schema["paths"]["/indexes/{name}/search"])
    assert {"/health", "/info", "/indexes", "/indexes/{name}/info"} <= set(schema["paths"])
    body = schema["paths"]["/search"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "queries" in body["properties"]


def test_openapi_description_names_every_mode_and_the_error_statuses(served):
    """/docs said 'Dense top-k search' and that bad input is a 400, while requests pick bm25 and hybrid too and
    bad input is also a 413, 415 or 431."""
    description = served.get("/openapi.json").json()["info"]["description"]
    assert "Dense top-k" not in description
    assert all(word in description for word in ("dense", "bm25", "hybrid", "413", "415", "431", "5xx"))


def test_the_api_docs_pages_load_swagger_ui_and_redoc_from_this_server_not_a_cdn(served):
    """/docs and /redoc loaded Swagger UI and ReDoc (and ReDoc's fonts, the favicon) from other hosts: both pages were
    blank on an offline server, and every visit told a third party. Every script, style and icon is now a path here."""
    for page in ("/docs", "/redoc"):
        html = served.get(page).body.decode()
        assert re.findall(r"(?:https?:)?//[\w.-]+\.\w+", html) == [], page  # no host named, nor a scheme-relative one
        assets = re.findall(r"""(?:src|href)=["'](/[^"']+)""", html)
        assert len(assets) >= (3 if page == "/docs" else 2), html
        for asset in assets:
            reply = served.get(asset)
            assert reply.status == 200 and len(reply.body) > 1000, asset
    refused = call(served.port, "POST", assets[0])  # a file takes GET: the 405's Allow was empty
    assert refused.status == 405 and refused.headers["allow"] == "GET, HEAD"


LONG = "word " * 41  # 205 characters, over the test limit of 200
BAD_REQUESTS = {
    "empty query": ("GET", "/search?q=&k=3", None, {}, 400, "empty"),
    "blank query": ("GET", "/search?q=%20%20%20", None, {}, 400, "empty"),
    "missing q": ("GET", "/search?k=3", None, {}, 400, "q: Field required"),
    "k zero": ("GET", "/search?q=cat&k=0", None, {}, 400, "k:"),
    "k too large": ("GET", "/search?q=cat&k=1001", None, {}, 400, "k:"),
    "k not a number": ("GET", "/search?q=cat&k=ten", None, {}, 400, "k:"),
    "long query": ("GET", f"/search?q={LONG.replace(' ', '+')}", None, {}, 400, "limit is 200"),
    "post text/plain": ("POST", "/search", b'{"queries": ["cat"]}', {"Content-Type": "text/plain"}, 415,
                        "application/json"),
    "post no content type": ("POST", "/search", b'{"queries": ["cat"]}', {}, 415, "application/json"),
    "post form": ("POST", "/search", b"queries=cat", {"Content-Type": "application/x-www-form-urlencoded"}, 415,
                  "application/json"),
    "malformed json": ("POST", "/search", b'{"queries": ["cat"', None, 400, "malformed JSON"),
    "invalid utf-8": ("POST", "/search", b'{"queries": ["\xff"]}', None, 400, "malformed JSON"),
    "json array": ("POST", "/search", b'["cat"]', None, 400, "the body is a JSON array, not an object: send one"),
    "no queries": ("POST", "/search", b'{"queries": []}', None, 400, "queries"),
    "empty query in list": ("POST", "/search", b'{"queries": ["cat", " "]}', None, 400, "empty"),
    "query not a string": ("POST", "/search", b'{"queries": [7]}', None, 400, "queries.0"),
    "post k zero": ("POST", "/search", b'{"queries": ["cat"], "k": 0}', None, 400, "k:"),
    "post k too large": ("POST", "/search", b'{"queries": ["cat"], "k": 5000}', None, 400, "k:"),
    "unknown field": ("POST", "/search", b'{"queries": ["cat"], "top": 3}', None, 400, "top"),
    "too many queries": ("POST", "/search", json.dumps({"queries": ["cat"] * 17}).encode(), None, 400,
                         "limit is 16"),
    "long query in body": ("POST", "/search", json.dumps({"queries": [LONG]}).encode(), None, 400, "limit is 200"),
    "lone surrogate": ("POST", "/search", b'{"queries": ["\\ud800"]}', None, 400, "lone surrogate U+D800"),
    "lone surrogate among good": ("POST", "/search", b'{"queries": ["cat", "dog \\udc00"]}', None, 400,
                                  "lone surrogate U+DC00 at character 5"),
    "deeply nested json": ("POST", "/search", b"[" * 2000 + b"]" * 2000, None, 400, "nests 2000 levels"),
    "too many hits": ("POST", "/search", json.dumps({"queries": ["cat"] * 3, "k": 1000}).encode(), None, 400,
                      "3000 hits; the limit is 2560"),
    "body too large": ("POST", "/search", json.dumps({"queries": ["cat " * 1100]}).encode(), None, 413, "limit"),
    "chunked body too large": ("POST-CHUNKED", "/search", json.dumps({"queries": ["cat " * 1100]}).encode(), None,
                               413, "limit"),
    "unknown mode": ("GET", "/search?q=cat&mode=sparse", None, {}, 400, "mode:"),
    "unknown mode in body": ("POST", "/search", b'{"queries": ["cat"], "mode": "sparse"}', None, 400, "mode:"),
    "k with an underscore": ("GET", "/search?q=cat&k=1_0", None, {}, 400, "whole number written in digits"),
    "k given twice": ("GET", "/search?q=cat&k=1&k=2", None, {}, 400, "'k' is given 2 times"),
    "q given twice": ("GET", "/search?q=cat&q=dog", None, {}, 400, "'q' is given 2 times"),
    "query string not utf-8": ("GET", "/search?q=%ff%fe", None, {}, 400, "not UTF-8"),
    "encoded lone surrogate": ("GET", "/search?q=%ed%a0%80", None, {}, 400, "not UTF-8"),
    "post k true": ("POST", "/search", b'{"queries": ["cat"], "k": true}', None, 400, "k:"),
    "post k string": ("POST", "/search", b'{"queries": ["cat"], "k": "10"}', None, 400, "k:"),
    "post k float": ("POST", "/search", b'{"queries": ["cat"], "k": 10.0}', None, 400, "k:"),
    "post k nan": ("POST", "/search", b'{"queries": ["cat"], "k": NaN}', None, 400,
                   "malformed JSON: NaN is not JSON (it has no NaN or Infinity)"),
    "post k infinity": ("POST", "/search", b'{"k": Infinity, "queries": ["cat"]}', None, 400,
                        "malformed JSON: Infinity is not JSON"),
    "post query -infinity": ("POST", "/search", b'{"queries": ["cat", -Infinity]}', None, 400,
                             "malformed JSON: -Infinity is not JSON"),
    "unknown index": ("GET", "/indexes/nope/search?q=cat", None, {}, 404, "no index named 'nope'"),
    "index name not utf-8": ("GET", "/indexes/%ff/search?q=cat", None, {}, 400,
                             "the path /indexes/%ff/search is not UTF-8 once %-decoded; percent-encode the index name"),
    "post index name not utf-8": ("POST", "/indexes/%ed%a0%80/search", b'{"queries": ["cat"]}', None, 400,
                                  "the path /indexes/%ed%a0%80/search is not UTF-8 once %-decoded"),
    "info index name not utf-8": ("GET", "/indexes/x%FF/info", None, {}, 400, "the path /indexes/x%FF/info is not"),
    "bad index name": ("GET", "/indexes/a.b/search?q=cat", None, {}, 404, "no index named 'a.b'; served: "),
    "path traversal": ("GET", "/indexes/..%2F..%2Fetc/search?q=cat", None, {}, 404, ""),
    "dotted traversal": ("GET", "/indexes/../../etc/passwd", None, {}, 404, ""),
    "unknown route": ("GET", "/nothing-here", None, {}, 404, "no route at /nothing-here; the routes are / (the"),
    "wrong method": ("DELETE", "/search", None, {}, 405, "/search takes GET, HEAD, POST, not DELETE"),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_requests_get_a_json_4xx_and_the_server_keeps_serving(served, case):
    method, path, body, headers, status, message = BAD_REQUESTS[case]
    if headers is None:
        headers = {"Content-Type": "application/json"}
    chunked = method == "POST-CHUNKED"
    reply = call(served.port, "POST" if chunked else method, path, body, headers, chunked=chunked)
    assert reply.status == status, reply.body
    assert reply.headers["content-type"] == "application/json"
    error = reply.json()["error"]
    assert isinstance(error, str) and error and message in error
    assert b"Traceback" not in reply.body
    if status == 405:
        assert "GET" in reply.headers["allow"]
    assert served.get("/search?q=cat&k=1").json()["hits"][0]["rank"] == 1


def test_a_damaged_bm25_part_is_the_server_s_fault_a_500_for_the_requests_that_need_it(served, tmp_path):
    """It was a 400, as if the client had sent bad input; the client's own bad input stays a 400."""
    from retriever.lexical_opening import open_lexical

    folder = tmp_path / "small"
    shutil.copytree(served.small_index, folder)
    (folder / "bm25" / "vocab.index.json").unlink()
    with pytest.raises(RetrieverError) as damage:
        open_lexical(folder, read_manifest(folder))
    searcher = served.searchers["small"]
    lexical, searcher.lexical, searcher.lexical_problem = searcher.lexical, None, damage.value
    try:
        for reply in (served.get("/indexes/small/search?q=cat&mode=hybrid"),
                      served.post_json("/indexes/small/search", {"queries": ["cat"], "mode": "bm25"})):
            assert reply.status == 500 and reply.json() == {"error": str(damage.value)}, reply.body
            assert f"retriever bm25 {folder} --overwrite" in str(damage.value) and "\n" not in str(damage.value)
        listed = {index["name"]: index for index in served.get("/indexes").json()["indexes"]}
        assert listed["small"]["modes"] == ["dense"] and listed["small"]["bm25_damage"] == str(damage.value)
        assert listed["tiny"]["bm25_damage"] is None and "hybrid" in listed["tiny"]["modes"]
        assert served.get("/indexes/small/search?q=cat&mode=bm25&k=0").status == 400
        assert served.get("/indexes/small/search?q=cat&k=1").status == 200  # dense still answers
        assert served.get("/indexes/tiny/search?q=cat&k=1&mode=hybrid").status == 200
    finally:
        searcher.lexical, searcher.lexical_problem = lexical, None


def test_a_bm25_part_scoring_infinity_is_a_500_not_a_200_of_invalid_json(served, tmp_path):
    """Its weights overwritten at their size (the files' sizes check out) gave `"score": Infinity` with a 200, which
    no JSON parser reads; dense requests of the same index, and the other index, are still answered."""
    import numpy as np

    from retriever.lexical_opening import open_lexical

    folder = tmp_path / "small"
    shutil.copytree(served.small_index, folder)
    weights = np.load(folder / "bm25" / "data.csc.index.npy", mmap_mode="r+")
    weights[:] = np.inf
    weights.flush()
    searcher = served.searchers["small"]
    lexical, searcher.lexical = searcher.lexical, open_lexical(folder, read_manifest(folder))
    try:
        replies = [served.get("/indexes/small/search?q=bee+flower&mode=bm25"),
                   served.post_json("/indexes/small/search", {"queries": ["cat", "bee flower"], "mode": "bm25"})]
        for reply in replies:
            assert reply.status == 500, reply.body
            assert "scored document" in reply.json()["error"] and "--verify" in reply.json()["error"]
        assert served.get("/indexes/small/search?q=bee+flower&k=1").status == 200
        assert served.get("/indexes/tiny/search?q=bee+flower&k=1&mode=bm25").status == 200
    finally:
        searcher.lexical = lexical


def test_a_damaged_fusion_record_is_a_500_for_hybrid_alone_and_listed(served):
    """It failed the whole index at start-up, dense included; the client had asked for nothing wrong."""
    from retriever.fusion import recorded_fusion

    searcher = served.searchers["tiny"]
    damage = recorded_fusion(searcher.index_dir, {"fusion": {"alpha": 2.0}}, None)[1]
    searcher.fusion_problem = damage
    try:
        for reply in (served.get("/indexes/tiny/search?q=cat&mode=hybrid"),
                      served.post_json("/indexes/tiny/search", {"queries": ["cat"], "mode": "hybrid"})):
            assert reply.status == 500 and reply.json() == {"error": str(damage)}, reply.body
        listed = {index["name"]: index for index in served.get("/indexes").json()["indexes"]}
        assert listed["tiny"]["modes"] == ["dense", "bm25"] and listed["tiny"]["fusion_damage"] == str(damage)
        assert served.get("/indexes/tiny/search?q=cat&k=1&mode=bm25").status == 200
        assert served.get("/indexes/tiny/search?q=cat&k=1").status == 200
    finally:
        searcher.fusion_problem = None


def test_a_mode_the_index_lacks_is_refused_in_the_api_s_terms(served):
    searcher = served.searchers["small"]
    lexical, searcher.lexical = searcher.lexical, None
    try:
        for reply in (served.get("/indexes/small/search?q=cat&mode=hybrid"),
                      served.post_json("/indexes/small/search", {"queries": ["cat"], "mode": "bm25"})):
            assert reply.status == 400, reply.body
            error = reply.json()["error"]
            assert error.startswith("index 'small' has no BM25 part") and "ask for mode dense" in error
            assert str(served.small_index) not in error and "--mode" not in error
    finally:
        searcher.lexical = lexical


def test_head_is_answered_wherever_get_is(served):
    for path in ("/health", "/search?q=cat&k=1", "/"):
        head = call(served.port, "HEAD", path)
        assert head.status == 200 and head.body == b"" and int(head.headers["content-length"]) > 0
    assert call(served.port, "HEAD", "/").headers["content-length"] == str(len(served.get("/").body))


def test_a_failing_search_is_a_json_500_without_traceback(served):
    searcher = served.searchers["small"]

    def explode(*args, **kwargs):
        raise RuntimeError("secret internals")

    searcher.search_vectors = explode
    try:
        reply = served.get("/indexes/small/search?q=cat")
    finally:
        del searcher.search_vectors
    assert reply.status == 500 and reply.json() == {"error": "internal server error"}
    assert served.get("/indexes/small/search?q=cat").status == 200


def test_a_query_the_encoder_fails_on_is_a_400_for_that_request_only(served):
    encoder = served.searchers["tiny"].encoder
    encode = encoder.encode_queries

    def fails_on_boom(texts, *args, **kwargs):
        if any("boom" in t for t in texts):
            raise RuntimeError("The size of tensor a (600) must match the size of tensor b (512)")
        return encode(texts, *args, **kwargs)

    queries = [f"query number {i}" for i in range(6)] + ["boom one", "boom two"]
    barrier = threading.Barrier(len(queries))
    replies: dict = {}

    def client(query: str) -> None:
        barrier.wait()
        replies[query] = served.post_json("/search", {"queries": [query], "k": 2})

    encoder.encode_queries = fails_on_boom
    try:
        run_in_threads(client, [(q,) for q in queries], timeout=30)
    finally:
        encoder.encode_queries = encode
    assert {q: replies[q].status for q in queries} == {q: 400 if "boom" in q else 200 for q in queries}
    assert "the encoder failed on this query (RuntimeError)" in replies["boom one"].json()["error"]
    assert replies["query number 0"].json()["results"][0]["query"] == "query number 0"


def test_concurrent_requests_are_micro_batched(served):
    clients, before = 24, served.forward_passes[0]
    barrier = threading.Barrier(clients)
    replies: list = [None] * clients

    def client(i: int) -> None:
        barrier.wait()
        replies[i] = served.get(f"/search?q=query+number+{i}&k=2")

    run_in_threads(client, [(i,) for i in range(clients)], timeout=30)
    assert all(r is not None and r.status == 200 for r in replies)
    assert [r.json()["query"] for r in replies] == [f"query number {i}" for i in range(clients)]
    passes = served.forward_passes[0] - before
    assert 1 <= passes < clients / 2, f"{clients} concurrent requests took {passes} forward passes"
    assert served.get("/health").json()["indexes"]["tiny"]["largest_batch"] > 1


def test_the_page_is_self_contained(served):
    reply = served.get("/")
    assert reply.status == 200 and reply.headers["content-type"].startswith("text/html")
    page = reply.body.decode()
    assert "<input" in page and "fetch(" in page
    assert "http://" not in page and "https://" not in page and "src=" not in page


def test_serve_help_documents_every_flag():
    result = CliRunner().invoke(serve_command, ["--help"])
    assert result.exit_code == 0
    for flag in ("--index NAME=PATH", "--host", "--port", "--max-wait-ms", "--max-batch", "--max-query-chars",
                 "--max-body-bytes", "--max-queries", "--max-hits", "--max-response-bytes", "--request-timeout",
                 "--timeout-keep-alive", "--threads", "--dtype", "--device"):
        assert flag in result.output, flag


@pytest.mark.parametrize("args, message", [
    ([], "give an INDEX folder or at least one --index"),
    (["--index", "../up=/tmp"], "invalid name '../up'"),
    (["--index", "a/b=/tmp"], "invalid name 'a/b'"),
    (["--index", "noequals"], "is not NAME=PATH"),
    (["--index", "x=/definitely/not/here"], "is not an index folder"),
    (["--index", "x=/tmp", "--index", "x=/tmp"], "used twice"),
    (["--max-hits", "9", "/tmp"], "9 is not in the range x>=10"),
])
def test_serve_refuses_bad_index_arguments_before_loading(args, message):
    result = CliRunner().invoke(serve_command, args)
    assert result.exit_code == 2 and message in result.output


def test_serve_command_runs_a_server_with_named_indexes(tiny_index, small_index, tmp_path):
    port = free_port()
    script = "from retriever.cli.serving import serve_command; serve_command()"
    process = subprocess.Popen([sys.executable, "-c", script, "--index", f"main={tiny_index}", "--index",
                                f"part={small_index}", "--port", str(port), "--device", "cpu", "--dtype", "fp32",
                                "--max-query-chars", "50", "--threads", "1", "--access-log"],
                               stdout=subprocess.DEVNULL, stderr=open(tmp_path / "stderr", "wb"),
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 45
        while True:
            try:
                if call(port, "GET", "/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            assert process.poll() is None, (tmp_path / "stderr").read_text()
            assert time.monotonic() < deadline, "retriever serve did not come up"
            time.sleep(0.1)
        listed = call(port, "GET", "/indexes").json()
        assert listed["default"] == "main" and [i["name"] for i in listed["indexes"]] == ["main", "part"]
        assert len(call(port, "GET", "/indexes/part/search?q=bee&k=50").json()["hits"]) == 6
        assert len(call(port, "GET", "/search?q=bee&k=50").json()["hits"]) == 12
        assert call(port, "GET", "/search?q=" + "a" * 51).status == 400
    finally:
        process.terminate()
        process.wait(15)
    logged = (tmp_path / "stderr").read_text()
    assert "serving main, part at http://127.0.0.1:" in logged
    assert '"GET /indexes/part/search?q=bee&k=50 HTTP/1.1" 200' in logged  # --access-log: it logged nothing


def invoke_serve(index, port: int, monkeypatch) -> Result:
    """`retriever serve` in this process, with configure_threads stubbed so the session's thread pools stay put."""
    monkeypatch.setattr("retriever.serving.configure_threads",
                        lambda threads, workers: {"torch": 1, "workers": 1, "cores": 1})
    return CliRunner().invoke(main, ["serve", str(index), "--port", str(port), "--device", "cpu", "--dtype", "fp32"])


@pytest.mark.parametrize("failure, message", [
    (IndexError("doc-store row out of range 0..11"),
     "error: index '{name}' failed its warm-up search (IndexError: doc-store row out of range 0..11); its files"),
    (RetrieverError("index.ivfdata: the index folder is damaged; rebuild it"),
     "error: index '{name}' failed its warm-up search: index.ivfdata: the index folder is damaged; rebuild it"),
])
def test_serve_reports_a_failing_warm_up_as_one_line_not_as_a_taken_port(tiny_index, monkeypatch, failure, message):
    def broken_rank(*args, **kwargs):
        raise failure

    monkeypatch.setattr("retriever.searching.Searcher.rank", broken_rank)
    result = invoke_serve(tiny_index, free_port(), monkeypatch)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[-1].startswith(message.format(name=tiny_index.name)), result.output
    assert "in use" not in result.output and "Traceback" not in result.output and "startup" not in result.output


def test_serve_reports_a_taken_port_before_loading_any_index(tiny_index, monkeypatch):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = invoke_serve(tiny_index, port, monkeypatch)
    assert result.exit_code == 1, result.output
    assert result.output == f"error: port {port} on 127.0.0.1 is in use: stop what listens there or pick another --port\n"


def test_serve_reports_an_index_that_fails_to_open_as_one_line(tiny_index, tmp_path, monkeypatch):
    damaged = tmp_path / "damaged"
    shutil.copytree(tiny_index, damaged)
    (damaged / "index.faiss").write_bytes(b"not an index")
    result = invoke_serve(damaged, free_port(), monkeypatch)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[-1].startswith("error: ") and "index.faiss" in result.output.splitlines()[-1]
    assert "in use" not in result.output and "Traceback" not in result.output


def test_serve_passes_model_to_the_one_moved_index_and_refuses_it_for_several(tmp_path, monkeypatch):
    """A moved index's error says to pass --model, which serve did not have."""
    import retriever.searching

    opened = []

    class Opened(Exception):
        pass

    def record(folder, **options):
        opened.append((folder, options["model"]))
        raise Opened()

    monkeypatch.setattr(retriever.searching, "Searcher", record)
    monkeypatch.setattr("retriever.index_opening.checked_manifest", lambda folder: {})  # the folder is empty
    port = str(free_port())
    result = CliRunner().invoke(serve_command, [str(tmp_path), "--model", "/models/m", "--port", port])
    assert isinstance(result.exception, Opened) and opened == [(tmp_path, "/models/m")]
    result = CliRunner().invoke(serve_command, ["--index", f"a={tmp_path}", "--index", f"b={tmp_path}",
                                                "--model", "/models/m", "--port", port])
    assert result.exit_code == 2 and "--model is the model of one moved index" in result.output

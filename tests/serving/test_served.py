"""Index names: letters of any script, served at their percent-encoded path."""
from unicodedata import normalize
from urllib.parse import quote

from serving_fixtures import call, served  # noqa: F401 - fixtures


def test_an_index_name_may_hold_letters_of_any_script_but_no_punctuation():
    from retriever.serving import valid_index_name

    for name in ("индекс", "索引", "नमस्ते", "índice", "idx_v2-b"):
        assert valid_index_name(name), name
    for name in ("a.b", "a b", "a/b", "", "x" * 65, "indice!"):
        assert not valid_index_name(name), name


def test_an_index_named_in_cyrillic_or_chinese_is_searched_at_its_percent_encoded_path(tiny_index):  # noqa: F811
    """Such names were refused ("use 1-64 letters, digits, '_' or '-'", ASCII ones alone): a folder `индекс` was
    served as `default`, and `--index индекс=PATH` was a usage error."""
    from retriever.searching import Searcher
    from retriever.serving import BatchSettings, create_app
    from serving_fixtures import ServerThread

    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    app = create_app({"мой": searcher, "索引": searcher}, batching=BatchSettings(warm_up=False))
    server = ServerThread(app).start()
    try:
        named = call(server.port, "GET", f"/indexes/{quote('索引')}/search?q=cat&k=2")
        listed = call(server.port, "GET", "/indexes")
        default = call(server.port, "GET", "/search?q=cat&k=2")
        decomposed = call(server.port, "GET", f"/indexes/{quote(normalize('NFD', 'мой'))}/info")
    finally:
        server.stop()
    assert named.status == 200, named.body
    assert named.json()["index"] == "索引" and named.json()["hits"] == default.json()["hits"]
    assert default.json()["index"] == "мой"
    assert [entry["name"] for entry in listed.json()["indexes"]] == ["мой", "索引"]
    # й sent as и and a combining breve (as macOS writes a folder name) is the name served: it was a 404 "no index
    # named 'мой'; served: мой", the two looking the same
    assert decomposed.status == 200 and decomposed.json()["name"] == "мой", decomposed.body


def test_the_openapi_name_parameter_states_the_rule_and_carries_no_regex_a_browser_reads_otherwise():
    """Its pattern `^[\\p{L}\\p{M}\\p{N}_-]{1,64}$` is read by OpenAPI tools as a JavaScript regex without the u flag,
    where `\\p{L}` is the letters p, {, L and }: Swagger UI's "Try it out" at /docs refused every name, `idx` too."""
    from retriever.serving import create_app
    from retriever.serving.schemas import NAME_RULE

    class Stub:  # create_app reads nothing of a searcher until its batchers start
        pass

    schema = create_app({"idx": Stub()}).openapi()
    for path in ("/indexes/{name}/search", "/indexes/{name}/info"):
        [name] = [p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == "name"]
        assert "pattern" not in name["schema"] and NAME_RULE in name["description"], name


def test_an_unknown_index_name_is_cut_short_in_the_404(served):
    """Every other name a client sends is clipped in its error; a 30,000-character index name in the path came back
    whole, a 30 KB message, for GET and POST alike."""
    for method in ("GET", "POST"):
        reply = call(served.port, method, f"/indexes/{'x' * 30_000}/search?q=cat" if method == "GET" else
                     f"/indexes/{'x' * 30_000}/search", b'{"queries": ["cat"]}', {"Content-Type": "application/json"})
        assert reply.status == 404 and reply.json() == {"error": f"no index named '{'x' * 60}...'; served: tiny, small"}

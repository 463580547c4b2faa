"""`retriever serve` timing flags that are not finite numbers are usage errors (probe round 8)."""
from __future__ import annotations

import re
import resource
import socket
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from retriever.cli import main
from retriever.cli.serving import serve_command
from retriever.errors import IndexDamaged
from retriever.serving.open_files import MOST_OPEN_FILES
from retriever.serving.protocol import guarded_protocol


@pytest.mark.parametrize("flag, value", [("--request-timeout", "nan"), ("--request-timeout", "inf"),
                                         ("--timeout-keep-alive", "nan"), ("--timeout-keep-alive", "inf"),
                                         ("--max-wait-ms", "nan")])
def test_a_timing_flag_that_is_not_a_finite_number_is_a_usage_error(flag, value, tmp_path, monkeypatch):
    """NaN passed click's range check: --request-timeout nan made every connection raise in uvloop's call_later
    (a traceback each, no request ever answered), --timeout-keep-alive nan a traceback after every response, and
    --max-wait-ms nan was taken as 0 without a word."""
    def must_not_start(*args, **kwargs):
        raise AssertionError(f"serve started with {flag} {value}")

    monkeypatch.setattr("retriever.cli.serving.listening_sockets", must_not_start)
    result = CliRunner().invoke(serve_command, [str(tmp_path), flag, value])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}'" in result.output and "is not a finite number" in result.output


@pytest.mark.parametrize("timeout", [float("nan"), float("inf")])
def test_the_protocol_refuses_a_request_timeout_that_is_not_a_positive_number(timeout):
    with pytest.raises(ValueError, match="the request timeout must be a positive number of seconds"):
        guarded_protocol(timeout)


class FakeSearcher:
    def __init__(self, folder, **kwargs) -> None:
        self.lexical = object() if "hyb" in str(folder) else None
        self.lexical_problem = IndexDamaged(f"{folder}/bm25: damaged") if "dmg" in str(folder) else None
        self.fusion_problem = None
        self.index_dir, self.manifest = folder, {}
        self.encoder = SimpleNamespace(dtype="fp32", query_model=object())


@pytest.fixture()
def fake_serve(monkeypatch):
    """serve_command with the listening, loading and serving stood in for: the runs it would have served."""
    ran = []
    monkeypatch.setattr("retriever.cli.serving.listening_sockets", lambda host, port: [socket.socket()])
    monkeypatch.setattr("retriever.serving.configure_threads",
                        lambda threads, workers: {"torch": 1, "workers": 1, "cores": 1})
    monkeypatch.setattr("retriever.searching.Searcher", FakeSearcher)
    monkeypatch.setattr("retriever.index_opening.checked_manifest", lambda folder: {})  # the folders are empty
    monkeypatch.setattr("retriever.serving.create_app", lambda searchers, *args, **kwargs: searchers)
    monkeypatch.setattr("retriever.cli.serving.run_app", lambda app, *args, **kwargs: ran.append(sorted(app)))
    return ran


@pytest.mark.parametrize("flag", [["--alpha", "0.5"], ["--fusion", "convex"], ["--rrf-k", "10"],
                                  ["--fusion-depth", "50"]])
def test_fusion_flags_where_no_index_served_has_bm25_are_refused(fake_serve, tmp_path, flag):
    """`serve DENSE_ONLY --alpha 0.5` served on, the flag unused: no request can be hybrid there (`search` refuses
    a fusion flag outside --mode hybrid)."""
    (tmp_path / "dense").mkdir()
    (tmp_path / "hyb").mkdir()
    result = CliRunner().invoke(main, ["serve", "--index", f"a={tmp_path / 'dense'}", *flag])
    assert result.exit_code == 1 and fake_serve == []
    assert result.output.splitlines()[-1] == (
        "error: the fusion flags (--fusion, --alpha, --rrf-k, --fusion-depth) apply only to hybrid search, and no "
        "index served (a) has a BM25 part: drop them, or add BM25 with `retriever bm25 INDEX`")
    both = CliRunner().invoke(main, ["serve", "--index", f"a={tmp_path / 'dense'}", "--index", f"b={tmp_path / 'hyb'}",
                                     *flag])
    assert both.exit_code == 0 and fake_serve == [["a", "b"]], both.output


def test_fusion_flags_where_the_served_bm25_part_is_damaged_say_so_not_that_there_is_none(fake_serve, tmp_path):
    """The refusal said "no index served has a BM25 part" of an index whose part is there but damaged."""
    (tmp_path / "dmg").mkdir()
    result = CliRunner().invoke(main, ["serve", "--index", f"a={tmp_path / 'dmg'}", "--alpha", "0.5"])
    assert result.exit_code == 1 and fake_serve == []
    assert result.output.splitlines()[-1] == (
        "error: the fusion flags (--fusion, --alpha, --rrf-k, --fusion-depth) apply only to hybrid search, and no "
        f"index served (a) has a BM25 part it can search: a's could not be opened: {tmp_path / 'dmg'}/bm25: damaged")


def test_allow_origin_is_checked_before_listening_and_given_to_the_app(fake_serve, tmp_path, monkeypatch):
    """--allow-origin https://page.example/ (a slash no browser's Origin has) would never match: a usage error
    before any socket is bound, not a flag unused without a word."""
    given = []
    monkeypatch.setattr("retriever.serving.create_app",
                        lambda searchers, *args, origins=(): given.append(origins) or searchers)
    (tmp_path / "hyb").mkdir()
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "hyb"), "--allow-origin", "https://page.example/"])
    assert result.exit_code == 2 and fake_serve == [] and given == []
    assert result.output.splitlines()[-1] == (
        "error: Invalid value for '--allow-origin': 'https://page.example/' is no origin: give scheme://host[:port] "
        "with nothing after it (e.g. https://search.example.com or http://localhost:3000), or * for any "
        "(see `main serve --help`)")
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "hyb"), "--allow-origin", "https://Page.example",
                                       "--allow-origin", "*"])
    assert result.exit_code == 0 and given == [("https://page.example", "*")], result.output
    assert CliRunner().invoke(main, ["serve", str(tmp_path / "hyb")]).exit_code == 0 and given[-1] == ()


@pytest.mark.parametrize("flags, warned", [(["--threads", "3000"], "2 workers x 3000 torch threads is 6000 threads"),
                                           (["--workers", "50"], "50 workers x 1 torch thread is 50 threads"),
                                           ([], None), (["--workers", "2", "--threads", "1"], None)])
def test_more_threads_than_cores_is_warned_of_at_start(fake_serve, tmp_path, monkeypatch, flags, warned):
    """`--threads 3000` on 2 cores was taken without a word, and made a minilm search of 8 queries ~170 times slower
    (18.8 ms on one thread, 3,250 ms on 3,000): threads past the cores only wait on one another."""
    monkeypatch.setattr("retriever.serving.configure_threads",
                        lambda threads, workers: {"torch": threads or 1, "workers": workers or 2, "cores": 2})
    (tmp_path / "idx").mkdir()
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "idx"), *flags])
    assert result.exit_code == 0 and fake_serve == [["idx"]], result.output
    if warned:
        assert f"warning: {warned} for the 2 cores this process may use" in result.output, result.output
    else:
        assert "warning" not in result.output, result.output


def test_serve_raises_its_open_files_limit_to_the_hard_limit(fake_serve, tmp_path):
    """Under a soft limit of 100 (1,024 is a common default), 300 idle connections, each closed only at
    --request-timeout, took every descriptor: each new client, a search included, was reset at once until they timed
    out. The hard limit is what the system allows; the soft one is only the default a process starts with."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (100, hard))
    try:
        (tmp_path / "hyb").mkdir()
        result = CliRunner().invoke(main, ["serve", str(tmp_path / "hyb")])
        assert result.exit_code == 0 and fake_serve == [["hyb"]], result.output
        raised = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert raised == (MOST_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, MOST_OPEN_FILES))


def test_an_ipv6_host_in_url_brackets_is_listened_on(monkeypatch, tmp_path):
    """`serve --host [::1]` failed with "cannot listen on [::1]:8000 (Name or service not known)"."""
    hosts = []

    def listening_sockets(host, port):
        hosts.append(host)
        raise KeyboardInterrupt  # serve no further

    monkeypatch.setattr("retriever.cli.serving.listening_sockets", listening_sockets)
    for given in ("[::1]", "::1", "127.0.0.1"):
        CliRunner().invoke(serve_command, [str(tmp_path), "--host", given])
    assert hosts == ["::1", "::1", "127.0.0.1"]


def test_serve_warns_at_start_of_an_index_whose_bm25_part_is_damaged(tiny_beir, tiny_model_dir, tmp_path, capsys):
    """It started silently, and bm25/hybrid requests to it failed one by one."""
    import json

    from retriever.cli.serving import load_searchers
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("flat"), progress=False)
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    (tmp_path / "idx" / "manifest.json").write_text(json.dumps({**manifest, "lexical": {**manifest["lexical"],
                                                                                        "docstore": "x"}}))
    load_searchers({"docs": tmp_path / "idx"}, device="cpu", dtype="fp32")
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith("warning: docs: its BM25 part could not be opened, so bm25 "
                                                         "and hybrid requests to it get a 500 until it is rebuilt: ")
    assert f"rebuild it with `retriever bm25 {tmp_path / 'idx'} --overwrite`" in warnings[0]


def test_serve_warns_at_start_of_an_index_whose_fusion_record_is_damaged(tiny_beir, tiny_model_dir, tmp_path, capsys):
    """Hybrid requests to it get a 500; like a damaged BM25 part, the operator hears of it at start-up."""
    import json

    from retriever.cli.serving import load_searchers
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("flat"), progress=False)
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    (tmp_path / "idx" / "manifest.json").write_text(json.dumps({**manifest, "fusion": "rrf"}))
    searchers = load_searchers({"docs": tmp_path / "idx"}, device="cpu", dtype="fp32")
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith("warning: docs: its recorded fusion is damaged, so hybrid "
                                                         "requests to it get a 500 until it is retuned or dropped: ")
    assert searchers["docs"].modes() == ["dense", "bm25"]


@pytest.mark.parametrize("flag", [{"rrf_k": 30.0}, {"method": "convex", "alpha": 0.3}])
def test_serve_warns_at_start_of_a_damaged_fusion_record_its_fusion_flags_stand_in_for(tiny_beir, tiny_model_dir,
                                                                                       tmp_path, capsys, flag):
    """`serve --rrf-k 30` on such an index served hybrid on the flag and said nothing of the record, which `info`
    shows DAMAGED: the operator hears of it, and of its repairs, once at start."""
    import json

    from retriever.cli.serving import load_searchers

    _index_pair(tiny_beir, tiny_model_dir, tmp_path)
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    fusion = {"method": "rrf", "rrf_k": "x", "alpha": 0.5, "depth": 1000}
    (tmp_path / "a" / "manifest.json").write_text(json.dumps({**manifest, "fusion": fusion}))
    overrides = {"method": None, "rrf_k": None, "alpha": None, "depth": None, **flag}
    searchers = load_searchers({"docs": tmp_path / "a", "fine": tmp_path / "b"}, device="cpu", dtype="fp32",
                               fusion_overrides=overrides)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith("warning: docs: its recorded fusion is damaged, so hybrid "
                                                         "requests to it use the fusion flags given until it is "
                                                         "retuned or dropped: ")
    assert f"{tmp_path / 'a' / 'manifest.json'}: fusion.rrf_k is str 'x'" in warnings[0]
    assert f"`retriever bm25 {tmp_path / 'a'} --tune-fusion-on DATASET --split train`" in warnings[0]
    assert f"`retriever bm25 {tmp_path / 'a'} --drop-fusion`" in warnings[0]
    assert "hybrid search refused" not in warnings[0]  # it is not: the flags stand in
    assert searchers["docs"].modes() == ["dense", "bm25", "hybrid"]


@pytest.mark.parametrize("damage", ["no manifest", "bad manifest", "missing file"])
def test_serve_checks_every_index_folder_before_loading_any_model(tiny_beir, tiny_model_dir, tmp_path, monkeypatch,
                                                                    damage):
    """`serve --index a=GOOD --index b=GOOD --index c=DAMAGED` loaded a's and b's models (seconds to a minute
    each) before c's one-line error."""
    import shutil

    from retriever.cli.serving import load_searchers
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.errors import RetrieverError
    from retriever.indexing import IndexParams, encode_and_index

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "a", encoder, IndexParams("flat"), progress=False, lexical=None)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.copytree(tmp_path / "a", tmp_path / "c")
    if damage == "no manifest":
        (tmp_path / "c" / "manifest.json").unlink()
    elif damage == "bad manifest":
        (tmp_path / "c" / "manifest.json").write_text("{", encoding="utf-8")
    else:
        (tmp_path / "c" / "docstore.parquet").unlink()

    def must_not_load(*args, **kwargs):
        raise AssertionError(f"a model was loaded for {args[2]} before every folder was checked")

    monkeypatch.setattr("retriever.encoder.recorded_encoder", must_not_load)
    with pytest.raises(RetrieverError, match=str(tmp_path / "c")):
        load_searchers({name: tmp_path / name for name in "abc"}, device="cpu", dtype="fp32")


def _index_pair(tiny_beir, tiny_model_dir, tmp_path) -> None:
    """a: an index with a BM25 part; b: a copy of it, to be damaged by the test."""
    import shutil

    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "a", encoder, IndexParams("flat"), progress=False)
    shutil.copytree(tmp_path / "a", tmp_path / "b")


def _must_not_load(*args, **kwargs):
    raise AssertionError(f"a model was loaded for {args[2]} before every folder's default mode was checked")


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
@pytest.mark.parametrize("bm25", ["none", "missing file"])
def test_serve_refuses_a_default_mode_an_index_cannot_serve_before_loading_any_model(tiny_beir, tiny_model_dir,
                                                                                      tmp_path, monkeypatch, mode,
                                                                                      bm25):
    """`serve --index a=GOOD --index b=NO_BM25 --mode hybrid` loaded a's model before b's refusal."""
    import json
    import shutil

    from retriever.cli.serving import load_searchers
    from retriever.errors import RetrieverError
    from retriever.lexical_opening import missing_lexical_message
    from retriever.searching import Searcher

    _index_pair(tiny_beir, tiny_model_dir, tmp_path)
    if bm25 == "none":
        manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
        (tmp_path / "b" / "manifest.json").write_text(json.dumps({**manifest, "lexical": None}))
        shutil.rmtree(tmp_path / "b" / manifest["lexical"].get("directory", "bm25"))
        expected = re.escape(missing_lexical_message(tmp_path / "b"))
    else:
        next((tmp_path / "b" / "bm25").iterdir()).unlink()
        expected = rf"{tmp_path / 'b'}.*retriever bm25 {tmp_path / 'b'} --overwrite"
    monkeypatch.setattr("retriever.encoder.recorded_encoder", _must_not_load)
    with pytest.raises(RetrieverError, match=expected):
        load_searchers({"a": tmp_path / "a", "b": tmp_path / "b"}, device="cpu", dtype="fp32", mode=mode)
    with pytest.raises(RetrieverError, match=expected):  # `search --mode hybrid` too, before loading the model
        Searcher(tmp_path / "b", device="cpu", dtype="fp32", mode=mode)


def test_serve_refuses_a_default_hybrid_mode_over_a_damaged_fusion_record_before_loading_any_model(
        tiny_beir, tiny_model_dir, tmp_path, monkeypatch):
    """`serve --mode hybrid` (and `Searcher(folder, mode="hybrid")`) on such an index failed only once its model, and
    every earlier index's, had loaded; a damaged BM25 part is refused there before any model loads."""
    import json

    from retriever.cli.serving import load_searchers
    from retriever.errors import IndexDamaged
    from retriever.searching import Searcher

    _index_pair(tiny_beir, tiny_model_dir, tmp_path)
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    (tmp_path / "b" / "manifest.json").write_text(json.dumps({**manifest, "fusion": "rrf"}))
    expected = rf"{tmp_path / 'b'}.*fusion.*tune it again with `retriever bm25 {tmp_path / 'b'} --tune-fusion-on"
    monkeypatch.setattr("retriever.encoder.recorded_encoder", _must_not_load)
    with pytest.raises(IndexDamaged, match=expected):
        load_searchers({"a": tmp_path / "a", "b": tmp_path / "b"}, device="cpu", dtype="fp32", mode="hybrid")
    with pytest.raises(IndexDamaged, match=expected):
        Searcher(tmp_path / "b", device="cpu", dtype="fp32", mode="hybrid")


@pytest.mark.parametrize("flags, max_hits", [([], 2560), (["--max-queries", "1000"], 10_000),
                                             (["--max-queries", "1000", "--max-hits", "50"], 50)])
def test_the_default_max_hits_fits_the_most_queries_max_queries_allows(fake_serve, tmp_path, monkeypatch, flags,
                                                                       max_hits):
    """`serve --max-queries 1000` refused a POST of 300 queries without a k (3,000 hits against --max-hits 2,560),
    though --help said the --max-hits default fits the most queries --max-queries lets a request send."""
    given = []
    monkeypatch.setattr("retriever.serving.create_app", lambda searchers, limits, *args, **kwargs:
                        given.append(limits) or searchers)
    (tmp_path / "hyb").mkdir()
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "hyb"), *flags])
    assert result.exit_code == 0, result.output
    assert given[-1].max_hits == max_hits


def test_a_third_ctrl_c_while_a_batch_ends_exits_at_once(monkeypatch, capsys):
    """Ctrl-C once more while the stop waited for the batch the encoder was on printed the CLI's "outputs are written
    under their names only when complete, so rerun the same command" (serve writes none) and ended in "terminate called
    without an active exception", exit code 134: the interpreter exited with a worker inside torch."""
    from retriever.cli.serving import run_app
    from retriever.serving.stopping import StoppingServer

    class Served:
        def start(self) -> None:
            pass

        def stop(self) -> None:
            raise KeyboardInterrupt  # the third Ctrl-C, while waiting for the batch

    def forced_stop(self, sockets=None) -> None:
        pass  # uvicorn has stopped on the Ctrl-C it caught (``StoppingServer.capture_signals``)

    def exit_now(code: int) -> None:
        raise SystemExit(("os._exit", code))

    monkeypatch.setattr(StoppingServer, "run", forced_stop)
    monkeypatch.setattr("retriever.cli.serving.start_listening", lambda *args, **kwargs: None)
    monkeypatch.setattr("os._exit", exit_now)
    app = SimpleNamespace(state=SimpleNamespace(served=Served()))
    try:
        run_app(app, [], "serving")
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C went on to the CLI's handler, and the interpreter's exit")
    except SystemExit as stopped:
        assert stopped.code == ("os._exit", 130)
    else:
        pytest.fail("run_app returned")
    assert capsys.readouterr().err.splitlines()[-1] == "stopped without waiting for the batch the encoder was on"


def test_a_ctrl_c_once_serving_is_announced_but_before_uvicorn_takes_signals_is_a_stop(monkeypatch, capsys):
    """In the milliseconds between the "serving" line and uvicorn installing its handlers, a Ctrl-C's KeyboardInterrupt
    came out of the server's run to the loading's handler: "interrupted (Ctrl-C) while the indexes loaded; nothing was
    served", exit 130, after the line saying it served. It ends serve as one a moment later does: exit 0, no error."""
    from retriever.cli.serving import run_app
    from retriever.serving.stopping import StoppingServer

    stopped = []

    class Served:
        def start(self) -> None:
            pass

        def stop(self) -> None:
            stopped.append(True)

    def interrupted_before_the_handlers(self, sockets=None) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(StoppingServer, "run", interrupted_before_the_handlers)
    monkeypatch.setattr("retriever.cli.serving.start_listening", lambda *args, **kwargs: None)
    try:
        run_app(SimpleNamespace(state=SimpleNamespace(served=Served())), [], "serving idx")
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C went on to the loading's handler")
    assert stopped == [True] and capsys.readouterr().err == "serving idx\n"


def test_ctrl_c_while_the_indexes_load_says_nothing_was_served(fake_serve, tmp_path, monkeypatch):
    """It said the CLI's "outputs are written under their names only when complete, so rerun the same command to
    finish (finished work is kept where it resumes)": serve writes no output and has nothing to finish."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("retriever.cli.serving.load_searchers", interrupted)
    (tmp_path / "hyb").mkdir()
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "hyb")])
    assert result.exit_code == 130 and fake_serve == []
    assert result.output.splitlines()[-1] == "error: interrupted (Ctrl-C) while the indexes loaded; nothing was served"


def test_ctrl_c_during_the_warm_up_is_a_ctrl_c_while_loading(monkeypatch):
    """The warm-up searches run before the server listens; a Ctrl-C there ended serve silently with exit code 0, as if
    it had served and stopped (while the indexes load it is exit code 130, saying nothing was served)."""
    from retriever.cli.serving import run_app

    stopped = []

    class Served:
        def start(self) -> None:
            raise KeyboardInterrupt

        def stop(self) -> None:
            stopped.append(True)

    app = SimpleNamespace(state=SimpleNamespace(served=Served()))
    with pytest.raises(KeyboardInterrupt):
        run_app(app, [], "serving")
    assert stopped == [True]


@pytest.mark.parametrize("flags, bound, seconds", [([], 8192, 30.0), (["--max-waiting-queries", "300"], 300, 30.0),
                                                   (["--max-queue-seconds", "2.5"], 8192, 2.5)])
def test_max_waiting_queries_reaches_the_batchers(fake_serve, tmp_path, monkeypatch, flags, bound, seconds):
    """Waiting requests were bounded by count alone (4,096 POSTs of 256 long queries: gigabytes waiting), and not by
    how long they had waited (abandoned ones held the next GET 150 s)."""
    given = []
    monkeypatch.setattr("retriever.serving.create_app", lambda searchers, limits, batching, **kwargs:
                        given.append(batching) or searchers)
    (tmp_path / "idx").mkdir()
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "idx"), *flags])
    assert result.exit_code == 0, result.output
    assert given[-1].max_pending_queries == bound and given[-1].max_queue_seconds == seconds


def test_serve_warns_at_start_when_the_hard_open_files_limit_keeps_it_low(fake_serve, tmp_path, monkeypatch):
    """Under `ulimit -Hn 80` the soft limit cannot be raised past 80: once some 70 idle connections held their
    descriptors, every new client was reset at once, and nothing said why."""
    from retriever.serving import open_files

    limits = {"now": (80, 80)}
    monkeypatch.setattr(open_files, "_getrlimit", lambda: limits["now"])
    monkeypatch.setattr(open_files, "_setrlimit", lambda soft, hard: limits.update(now=(soft, hard)))
    (tmp_path / "idx").mkdir()
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "idx")])
    assert result.exit_code == 0 and "warning: the open-files limit is 80" in result.output, result.output
    assert "ulimit -Hn" in result.output
    limits["now"] = (1024, 1 << 20)
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "idx")])
    assert "open-files limit" not in result.output and limits["now"][0] == MOST_OPEN_FILES


def test_an_index_name_taken_by_the_positional_index_says_so(tmp_path):
    """`serve idx.v2 --index idx-v2=OTHER` said only "the name 'idx-v2' is used twice", a name the user wrote once:
    INDEX is served under its folder's name made URL-safe, which the message now names, with the way out."""
    (tmp_path / "idx.v2").mkdir()
    (tmp_path / "other").mkdir()
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "idx.v2"), "--index", f"idx-v2={tmp_path / 'other'}"])
    assert result.exit_code == 2
    assert "INDEX" in result.output and "idx.v2 is served as 'idx-v2'" in result.output, result.output
    assert "--index NAME=PATH" in result.output


def test_one_folder_under_two_names_is_opened_once(tiny_beir, tiny_model_dir, tmp_path, capsys):
    """`serve --index a=IDX --index b=IDX` (or IDX and a link to it) loaded the FAISS index and doc store twice; only
    the model was shared. Both names now serve one opened index; each still has its own batcher."""
    from retriever.cli.serving import load_searchers
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("flat"), progress=False)
    (tmp_path / "link").symlink_to(tmp_path / "idx")
    searchers = load_searchers({"a": tmp_path / "idx", "b": tmp_path / "link"}, device="cpu", dtype="fp32")
    assert searchers["a"].index is searchers["b"].index and searchers["a"].documents is searchers["b"].documents
    assert "b shares the loaded index of a" in capsys.readouterr().err


@pytest.mark.parametrize("used, said", [({"torch": 1, "workers": 1, "cores": 1}, "1 worker x 1 torch thread,"),
                                        ({"torch": 3, "workers": 2, "cores": 6}, "2 workers x 3 torch threads,")])
def test_the_start_line_counts_workers_and_threads_in_words_that_agree(fake_serve, tmp_path, monkeypatch, used, said):
    """It said `1 workers x 1 torch threads` on one core."""
    announced = []
    monkeypatch.setattr("retriever.serving.configure_threads", lambda threads, workers: used)
    monkeypatch.setattr("retriever.cli.serving.run_app",
                        lambda app, sockets, announce, *args, **kwargs: announced.append(announce))
    (tmp_path / "idx").mkdir()
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "idx")])
    assert result.exit_code == 0 and len(announced) == 1, result.output
    assert f"(API docs at /docs; {said} encoding in fp32)" in announced[0]


def test_max_body_bytes_is_given_to_the_protocol_as_to_the_app(fake_serve, tmp_path, monkeypatch):
    """The protocol refuses a chunked body whose chunk sizes pass the limit before its data comes: it must hold the
    flag's limit, not the default."""
    protocols = []
    monkeypatch.setattr("retriever.cli.serving.run_app", lambda app, *args, http, **kwargs: protocols.append(http))
    (tmp_path / "idx").mkdir()
    result = CliRunner().invoke(main, ["serve", str(tmp_path / "idx"), "--max-body-bytes", "5000"])
    assert result.exit_code == 0 and protocols[0].max_body_bytes == 5000, result.output

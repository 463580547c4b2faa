import faiss
import numpy as np
import pytest

from retriever.errors import RetrieverError
from retriever.faiss_index import IndexParams, default_nlist, default_pq_m, factory_string, new_index
from retriever.index_checks import check_trainable, training_needs  # rows of docs/faults.md name these tests here


def test_ivf_defaults_are_sane():
    assert default_nlist(1_000_000) == 4000
    assert default_nlist(100) == 2
    assert default_pq_m(384) == 48 and 768 % default_pq_m(768) == 0


def test_the_default_lists_leave_faiss_39_training_points_each_of_a_sample_smaller_than_the_corpus(capfd):
    """1M documents got 4·√N = 4000 lists (at most N/39) to train on the 100,000 vectors of the default --train-size,
    25 a list: FAISS printed `WARNING clustering 100000 points to 4000 centroids: please provide at least 156000
    training points` amid the build's progress, and trained lists short of the points it asks for."""
    assert factory_string(IndexParams("ivf-ondisk"), 384, 1_000_000) == "IVF2564,SQ8"  # 100,000 // 39
    params = IndexParams("ivf-ondisk", train_size=2000)
    spec = factory_string(params, 8, 10_000)
    assert spec == "IVF51,SQ8"  # it was IVF256: 7.8 training points a list
    new_index(spec, 8, params).train(np.random.default_rng(0).standard_normal((2000, 8), dtype=np.float32))
    assert "WARNING clustering" not in capfd.readouterr().err


def test_refined_index_rescores_k_factor_candidates_and_keeps_it_on_disk(tmp_path):
    index = new_index("IVF4,PQ2x4,RFlat", 8, IndexParams("IVF4,PQ2x4,RFlat", refine_k_factor=30))
    faiss.write_index(index, str(tmp_path / "i.faiss"))
    assert faiss.downcast_index(faiss.read_index(str(tmp_path / "i.faiss"))).k_factor == 30


@pytest.mark.parametrize("index_type, expected", [
    ("flat", "Flat"), ("hnsw", "HNSW32,Flat"), ("ivfpq", "IVF2564,PQ48"), ("ivf-ondisk", "IVF2564,SQ8"),
    ("IVF10,Flat", "IVF10,Flat"),
])
def test_index_types_become_factory_strings(index_type, expected):
    assert factory_string(IndexParams(index_type), 384, 1_000_000) == expected


def test_pq_m_must_divide_the_dimension():
    with pytest.raises(RetrieverError, match="must divide"):
        factory_string(IndexParams("ivfpq", pq_m=5), 384, 1_000_000)


@pytest.mark.parametrize("spec", ["IDMap,Flat", "IDMap2,HNSW32,Flat", "IDMap,IVF4,Flat"])
def test_idmap_factories_are_refused_when_the_settings_are_made(spec):
    """The tool numbers the vectors itself: FAISS would refuse `add` only after the whole corpus is encoded."""
    with pytest.raises(RetrieverError, match="IDMap indexes are not supported"):
        IndexParams(spec)


@pytest.mark.parametrize("spec", [
    "IVF4,Flat", "IVF4,PQ4x4", "PQ4x4", "OPQ4,Flat", "OPQ4_16,IVF4,PQ4x4", "PCA16,Flat", "PCAR16,IVF4,Flat",
    "ITQ16,Flat", "HNSW8,PQ4x4", "IVF4,Flat,Refine(PQ8x4)", "IVF4,PQ4x4,RFlat", "IVF4_HNSW8,Flat", "RQ1x4",
    "IVF4,RQ2x4", "PRQ2x2x4", "IVF4,LSQ2x4", "PQ4x4fs", "PCAW16,IVF4,Flat"])
def test_training_needs_are_what_faiss_refuses_below(spec):
    """The fewest training vectors is where FAISS starts to train: one fewer fails (it failed only after the corpus
    was encoded, since only IVF lists and an IVF's or a bare index's PQ codes were counted: OPQ, PCA, HNSW over PQ
    and residual quantizers passed the check)."""
    dim, params = 32, IndexParams(spec)
    needed = max(training_needs(new_index(spec, dim, params)))[0]
    vectors = np.random.default_rng(0).standard_normal((needed, dim)).astype("float32")
    new_index(spec, dim, params).train(vectors)
    with pytest.raises(RuntimeError):
        new_index(spec, dim, params).train(vectors[:-1])
    check_trainable(params, dim, needed)
    with pytest.raises(RetrieverError, match=f"trains on at least {needed} vectors, and the corpus has {needed - 1} "):
        check_trainable(params, dim, needed - 1)


def test_a_whitened_pca_needs_one_vector_more_than_its_dimensions_where_faiss_does_not_refuse():
    """'PCAW8,Flat' trained on 8 vectors (they vary in 7 directions about their mean) whitened the 8th by a spread of
    about 0: FAISS stored infinite or huge vectors without a word (on unit vectors every search found no hits); now
    refused before encoding. Whitened, each direction has a spread of 1, so no trained-on vector is 10 from 0."""
    vectors = np.random.default_rng(0).standard_normal((9, 32)).astype("float32")
    for count, sound in (8, False), (9, True):
        index = new_index("PCAW8,Flat", 32, IndexParams("PCAW8,Flat"))
        index.train(vectors[:count])
        pca = faiss.downcast_VectorTransform(faiss.downcast_index(index).chain.at(0))
        assert bool(np.abs(pca.apply(vectors[:count])).max() < 10) is sound
    check_trainable(IndexParams("PCAW8,Flat"), 32, 9)
    with pytest.raises(RetrieverError, match=r"^--index-type 'PCAW8,Flat' trains on at least 9 vectors, and the corpus "
                                             r"has 8 documents \(a whitened PCA to 8 dimensions\): use a PCA without "
                                             r"whitening \('PCA' or 'PCAR' for 'PCAW' or 'PCAWR' in --index-type\) or "
                                             r"a flat index$"):
        check_trainable(IndexParams("PCAW8,Flat"), 32, 8)


def test_a_corpus_of_one_document_too_few_to_train_is_counted_in_the_singular():
    """`build one.jsonl --index-type ivfpq` on a one-passage corpus ("the corpus has 1 documents")."""
    with pytest.raises(RetrieverError, match=r"trains on at least 2 vectors, and the corpus has 1 document \("):
        check_trainable(IndexParams("ivfpq"), 32, 1)


def test_the_training_sample_pass_over_the_shards_shows_its_progress(tmp_path, capsys):
    """The sample is read by a pass over every shard (15 GB of Parquet at 10M vectors) that said nothing on stderr
    until the `training ... on N sampled vectors` line after it."""
    from retriever.faiss_index import train
    from retriever.shards import write_shard

    shards = []
    for part in range(3):
        shards.append(tmp_path / f"embeddings-w000of001-{part:05d}.parquet")
        write_shard(shards[-1], [f"d{part}-{row}" for row in range(20)],
                    np.random.default_rng(part).random((20, 8), dtype=np.float32), {})
    index = new_index("IVF2,Flat", 8, IndexParams())
    assert train(index, shards, 60, IndexParams("IVF2,Flat", train_size=30), "IVF2,Flat") == 30
    bar = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if line.startswith("sample")]
    assert bar and "3/3" in bar[-1], bar



def test_faiss_running_out_of_memory_while_training_is_one_line(tmp_path, monkeypatch):
    """FAISS raises std::bad_alloc as MemoryError, which came out as a traceback where its RuntimeErrors are one
    line (seen under ``ulimit -v`` with an estimate that left OPQ's training out)."""
    from retriever import faiss_index
    from retriever.shards import write_shard

    class OutOfMemory:  # FAISS's own failure needs a limit tighter than the estimate, which now foresees it
        is_trained, d = False, 8

        def train(self, sample):
            raise MemoryError("std::bad_alloc")

    shard = tmp_path / "embeddings-w000of001-00000.parquet"
    write_shard(shard, [f"d{row}" for row in range(20)], np.random.default_rng(0).random((20, 8), dtype=np.float32), {})
    monkeypatch.setattr(faiss_index, "check_training_memory", lambda *args, **kwargs: 1)
    monkeypatch.setattr(faiss_index, "quiet_codebooks", lambda *args: None)  # it reads a real index's codebooks
    with pytest.raises(RetrieverError, match=r"^FAISS ran out of memory training 'OPQ4,IVF2,PQ4' on 20 vectors; "
                                             r"give it more memory .*--train-size\)$"):
        faiss_index.train(OutOfMemory(), [shard], 20, IndexParams(), "OPQ4,IVF2,PQ4", progress=False)

def test_faiss_refusing_to_train_names_the_string_the_vectors_their_width_and_what_to_change(tmp_path):
    """'PCAW8,IVF2,Flat' over 12 copies of one document passes check_trainable (9 vectors needed), and FAISS refuses
    the infinite vectors its whitening makes of them. The line advised "fewer lists (...) or codes of fewer bits, more
    training vectors, or a flat index" for an index without codes, naming neither the width nor the cause."""
    from retriever import faiss_index
    from retriever.index_checks import training_failure
    from retriever.shards import write_shard

    spec, shard = "PCAW8,IVF2,Flat", tmp_path / "embeddings-w000of001-00000.parquet"
    copies = np.tile(np.random.default_rng(0).standard_normal((1, 32), dtype=np.float32), (12, 1))
    write_shard(shard, [f"d{row}" for row in range(12)], copies, {})
    check_trainable(IndexParams(spec), 32, 12)
    with pytest.raises(RetrieverError) as refused:
        faiss_index.train(new_index(spec, 32, IndexParams(spec)), [shard], 12, IndexParams(spec), spec, progress=False)
    assert str(refused.value) == (
        "FAISS could not train 'PCAW8,IVF2,Flat' on 12 vectors of 32 dimensions: input contains NaN's or Inf's (its "
        "whitened PCA divides each direction by the vectors' spread along it, and they vary in fewer directions than "
        "it keeps: are many documents the same?); use a PCA without whitening ('PCA' or 'PCAR' for 'PCAW' or 'PCAWR' "
        "in --index-type), more distinct documents, or a flat index")
    # Another refusal gets the changes the index's own parts allow, and a --train-size when that cut the sample
    assert training_failure("IVF4,PQ4x4", 32, 300, 1000, IndexParams("IVF4,PQ4x4", train_size=300), "a reason") == (
        "FAISS could not train 'IVF4,PQ4x4' on 300 vectors of 32 dimensions: a reason; use fewer lists (a smaller "
        "number after 'IVF' in --index-type), PQ codes of fewer bits (a smaller number after 'x' in --index-type; "
        "none is 8), --train-size above 300, or a flat index")
    assert training_failure("IVF8,PQ16x3", 32, 40, 40, IndexParams("ivfpq"), "a reason").endswith(
        "'IVF8,PQ16x3' (--index-type 'ivfpq') on 40 vectors of 32 dimensions: a reason; use fewer lists (--nlist), "
        "more documents, or a flat index")


@pytest.mark.parametrize("index_type, setting, value", [("hnsw", "ef_search", 8), ("ivfpq", "nprobe", 2),
                                                          ("hnsw", "ef_search", 128), ("ivfpq", "nprobe", 64)])
def test_plain_faiss_opens_the_index_file_with_the_manifests_search_settings(tiny_beir, tiny_model_dir, tmp_path,
                                                                              index_type, setting, value):
    """FAISS saves nprobe and efSearch in the file, but the file was written with FAISS's own 1 and 16 while the
    tuned values lived only in the manifest, so a user opening index.faiss in plain FAISS got lower recall. A value
    past the graph's vectors or the IVF's lists is stored capped there, as search caps it (the README says so)."""
    import json

    from retriever.encoder import Encoder, EncoderSettings
    from retriever.faiss_index import IndexParams
    from retriever.indexing import encode_and_index

    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    params = IndexParams(index_type=index_type, nlist=2 if index_type == "ivfpq" else None,
                         search_defaults={setting: value})
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, params=params, progress=False)
    recorded = json.loads((tmp_path / "idx" / "manifest.json").read_text())["index"]["search_defaults"][setting]
    plain = faiss.read_index(str(tmp_path / "idx" / "index.faiss"))
    stored = (faiss.extract_index_ivf(plain).nprobe if setting == "nprobe"
              else faiss.downcast_index(plain).hnsw.efSearch)
    most = faiss.extract_index_ivf(plain).nlist if setting == "nprobe" else plain.ntotal
    assert recorded == value and stored == min(recorded, most) and stored != (1 if setting == "nprobe" else 16)


def test_numpy_numbers_in_the_settings_become_python_numbers():
    """A notebook's np.int64 / np.float64 reached the manifest's json.dump (or FAISS's SWIG setters) after the
    whole corpus was encoded: 'Object of type int64 is not JSON serializable'."""
    params = IndexParams("hnsw", hnsw_m=np.int64(8), ef_construction=np.int32(40), target_recall=np.float64(0.9),
                         tuning_queries=np.int64(5))
    assert [type(v) for v in (params.hnsw_m, params.ef_construction, params.target_recall, params.tuning_queries,
                              IndexParams("ivfpq", nlist=np.uint16(3)).nlist)] == [int, int, float, int, int]
    new_index(factory_string(params, 8, 100), 8, params)


@pytest.mark.parametrize("settings, message", [
    ({"hnsw_m": 0}, "--hnsw-m must be a whole number of at least 2, not 0"),  # FAISS aborted the process
    ({"hnsw_m": "8"}, "--hnsw-m must be a whole number of at least 2, not '8'"),
    ({"nlist": 0}, "--nlist must be a whole number of at least 1, not 0"),  # was read as 'no nlist given'
    ({"ef_construction": 2.5}, "--ef-construction must be a whole number of at least 1, not 2.5"),
    ({"train_size": True}, "--train-size must be a whole number of at least 1, not True"),
    ({"train_size": 0}, "--train-size must be a whole number of at least 1, not 0"),  # once refused after encoding
    ({"target_recall": 0}, r"--target-recall must be a number in \(0, 1\], not 0"),
    ({"target_recall": float("nan")}, r"--target-recall must be a number in \(0, 1\], not nan"),
    ({"target_recall": "0.9"}, r"--target-recall must be a number in \(0, 1\], not '0.9'"),
])
def test_library_settings_are_refused_as_the_cli_refuses_them(settings, message):
    with pytest.raises(RetrieverError, match=f"^{message}$"):
        IndexParams("hnsw", **settings)


def test_an_index_faiss_cannot_build_names_every_index_type():
    """The hint listed flat, hnsw and ivfpq, leaving out ivf-ondisk, which --index-type takes too."""
    from retriever.choices import INDEX_TYPES
    with pytest.raises(RetrieverError, match="FAISS cannot build index") as caught:
        new_index("PQ5", 8, IndexParams())
    assert all(name in str(caught.value) for name in INDEX_TYPES), str(caught.value)


@pytest.mark.parametrize("setting", ["hnsw_m", "ef_construction"])
def test_an_hnsw_setting_past_a_c_int_is_refused_when_given(setting):
    """FAISS takes them as a C int: `--ef-construction 3000000000` was an OverflowError traceback (`--hnsw-m`, 'C++
    exception stoi'), met only once the corpus was encoded."""
    with pytest.raises(RetrieverError, match=f"^--{setting.replace('_', '-')} must be at most 2147483647 \\(FAISS "
                                             "takes it as a C int\\), not 3000000000$"):
        IndexParams("hnsw", **{setting: 3_000_000_000})
    IndexParams("hnsw", **{setting: 2**31 - 1})


def test_a_refine_k_factor_faiss_cannot_read_back_is_refused_when_given():
    """`--refine-k-factor 1001` built an index (exit 0) that every search then called damaged: FAISS reads an
    IndexRefine's k_factor back only up to 1000."""
    with pytest.raises(RetrieverError, match=r"^--refine-k-factor must be at most 1000 \(FAISS reads no index with a "
                                             r"larger one back\), not 1001$"):
        IndexParams("IVF4,Flat,RFlat", refine_k_factor=1001)
    IndexParams("IVF4,Flat,RFlat", refine_k_factor=1000)


@pytest.mark.parametrize("arguments, said", [
    (dict(index_type=5), "index_type must be"), (dict(search_defaults={"nprobe": "x"}), "search_defaults"),
    (dict(search_defaults={"nprobe": 0}), "search_defaults"), (dict(search_defaults={"efsearch": 64}), "efsearch"),
    (dict(search_defaults=[("nprobe", 4)]), "search_defaults"),
])
def test_library_index_settings_of_the_wrong_kind_are_named_at_once(arguments, said):
    """index_type=5 was a TypeError ('int' is not iterable); search_defaults={"nprobe": "x"} (or 0, or a misspelt
    key) built an index with exit 0 that every search then called damaged (or whose setting was never used)."""
    with pytest.raises(RetrieverError, match=said):
        IndexParams(**arguments)
    assert IndexParams("hnsw", search_defaults={"ef_search": np.int64(64)}).search_defaults == {"ef_search": 64}


@pytest.mark.parametrize("index_type, defaults, taken", [
    ("hnsw", {"nprobe": 5}, "give ef_search instead"), ("flat", {"nprobe": 5}, "exact and takes no search setting"),
    ("flat", {"ef_search": 64}, "exact"), ("ivfpq", {"ef_search": 64}, "give nprobe instead"),
    ("ivf-ondisk", {"ef_search": 64}, "give nprobe instead"),
])
def test_a_search_default_the_index_type_does_not_use_is_refused(index_type, defaults, taken):
    """IndexParams("hnsw", search_defaults={"nprobe": 5}) was recorded, shown by `info` as `search: nprobe=5`, and
    never used: the CLI refuses --nprobe on an index without IVF lists."""
    with pytest.raises(RetrieverError, match=rf"^search_defaults\['{list(defaults)[0]}'\] applies to .*{taken}"):
        IndexParams(index_type, search_defaults=defaults)
    assert IndexParams("hnsw", search_defaults={"nprobe": None, "ef_search": 64}).search_defaults["ef_search"] == 64
    assert IndexParams("ivfpq", search_defaults={"nprobe": 8}).search_defaults == {"nprobe": 8}


@pytest.mark.parametrize("index_type, settings, flag", [
    ("hnsw", {"nlist": 64}, "--nlist"), ("flat", {"ef_construction": 100}, "--ef-construction"),
    ("ivfpq", {"hnsw_m": 16}, "--hnsw-m"), ("IVF4,Flat", {"pq_m": 4}, "--pq-m"), ("hnsw", {"train_size": 10},
                                                                                   "--train-size"),
    ("flat", {"refine_k_factor": 10}, "--refine-k-factor"), ("ivfpq", {"part_size": 10}, "--part-size"),
])
def test_a_setting_the_index_type_does_not_use_is_refused_as_the_cli_refuses_its_flag(index_type, settings, flag):
    """IndexParams("hnsw", nlist=64) built the default graph without a word, while `--nlist` with `--index-type hnsw`
    is a usage error; a setting left at its default still passes."""
    with pytest.raises(RetrieverError, match=f"^{flag} is used only by .*, not by --index-type {index_type!r}; drop"):
        IndexParams(index_type, **settings)
    IndexParams(index_type, **{name: getattr(IndexParams, name) for name in settings})


def test_a_tuning_queries_count_without_a_target_recall_is_refused_as_the_cli_refuses_it():
    """IndexParams("hnsw", tuning_queries=5) built an untuned index with the count unused, as `--tuning-queries 5`
    without --target-recall did before the CLI refused it."""
    with pytest.raises(RetrieverError, match=r"^--tuning-queries is used only with --target-recall"):
        IndexParams("hnsw", tuning_queries=5)
    assert IndexParams("hnsw", tuning_queries=5, target_recall=0.9).tuning_queries == 5


def test_a_search_default_and_a_target_recall_together_are_refused():
    """IndexParams("hnsw", target_recall=0.9, search_defaults={"ef_search": 64}) built an index whose default was the
    tuned efSearch, the 64 replaced without a word."""
    with pytest.raises(RetrieverError, match=r"^search_defaults\['ef_search'\] and target_recall both set"):
        IndexParams("hnsw", target_recall=0.9, search_defaults={"ef_search": 64})
    IndexParams("hnsw", target_recall=0.9, search_defaults={"ef_search": None})


@pytest.mark.parametrize("settings", [{"ray_workers": 2}, {"ray_cpus_per_worker": 2}])
def test_ray_worker_settings_without_a_ray_address_are_refused(settings):
    """IndexParams("ivf-ondisk", ray_workers=2) filled the parts in local processes, the setting unused, while the
    CLI refuses --ray-workers without --ray."""
    with pytest.raises(RetrieverError, match=r"^ray_workers and ray_cpus_per_worker size Ray's workers, and "):
        IndexParams("ivf-ondisk", **settings)
    IndexParams("ivf-ondisk", ray_address="local", **settings)


@pytest.mark.parametrize("index_type", ["flat", "hnsw", "ivfpq", "IVF4,Flat"])
def test_a_ray_address_for_a_type_built_in_one_process_is_refused(index_type):
    """IndexParams("hnsw", ray_address="auto") built the graph in this process, Ray never used, while `index --ray`
    refuses it: only ivf-ondisk's parts are Ray tasks."""
    with pytest.raises(RetrieverError, match=r"^ray_address fills the parts of an ivf-ondisk index; other index types "
                                             r"are built in one process: add index_type='ivf-ondisk' or drop "
                                             r"ray_address$"):
        IndexParams(index_type, ray_address="auto")
    IndexParams("ivf-ondisk", ray_address="auto")


def test_a_tuning_k_without_a_target_recall_is_refused():
    """IndexParams("hnsw", tuning_k=100) was kept unused: no tuning runs without target_recall."""
    with pytest.raises(RetrieverError, match=r"^tuning_k \(the k of the recall@k --target-recall tunes for\) is used "
                                             r"only with target_recall; set target_recall or drop tuning_k$"):
        IndexParams("hnsw", tuning_k=100)
    assert IndexParams("hnsw", tuning_k=100, target_recall=0.9).tuning_k == 100


def test_a_factory_string_too_long_for_faiss_parser_is_refused_not_a_crash():
    """`--index-type` of 15,000 characters killed the process with SIGSEGV in FAISS's regex parser (2,000 under a
    1 MiB stack), after `build` had loaded the model: no message, exit 139."""
    spec = "PCA16," * 40 + "Flat"
    with pytest.raises(RetrieverError, match=r"^--index-type is 244 characters long; a FAISS factory string is a few "
                                             r"short parts \('IVF4096,PQ48'\) and FAISS's parser crashes on long "
                                             r"ones: give at most 200 characters$"):
        IndexParams(spec)
    with pytest.raises(RetrieverError, match="244 characters long"):
        new_index(spec, 32, IndexParams())


def _refused_as_the_flag_refuses_it(spec: str, said: str, width: int) -> None:
    """The library's settings and its index maker refuse the string in the flag's words."""
    for make in (lambda: IndexParams(spec), lambda: new_index(spec, width, IndexParams())):
        with pytest.raises(RetrieverError) as caught:
            make()
        assert str(caught.value) == said


@pytest.mark.parametrize("spec", ["Flatt", "IVF,Flat", "Flat ", ""])
def test_a_string_faiss_cannot_read_is_refused_when_the_settings_are_made_as_the_flag_refuses_it(spec):
    """No width makes it an index: it was refused only when the build made its first index, after the model loaded.
    A string that fits some widths and not others ('PQ5') waits for the vectors' width."""
    from retriever.faiss_index import unreadable_index_type

    said = (f"FAISS cannot read {spec!r} as an index type (could not parse index string{' ' if spec else ''}"
            f"{spec.rstrip()}); give flat, hnsw, ivfpq, ivf-ondisk or a FAISS factory string, e.g. 'IVF1024,PQ48' or "
            "'HNSW64,Flat'")
    assert unreadable_index_type(spec) == said
    _refused_as_the_flag_refuses_it(spec, said, width=8)
    assert unreadable_index_type("PQ5") is None and unreadable_index_type("IVF4(PQ7),Flat") is None


@pytest.mark.parametrize("spec, part", [("IVF16,Flatt", "code description Flatt"),
                                        ("IVF4096,SQ9", "code description SQ9"),
                                        ("IVF4096,PQ48y", "code description PQ48y"),
                                        ("HNSW32,Flatt", "HNSW code description Flatt"),
                                        ("IVF16_HNSW32,Flatt", "code description Flatt")])
def test_a_typo_in_a_factory_strings_codes_is_refused_when_the_settings_are_made(spec, part):
    """FAISS words it 'could not parse code description ...', not 'could not parse index string', so it passed the
    flag and IndexParams and was refused after the model loaded as a misfit of the vectors' width."""
    from retriever.faiss_index import unreadable_index_type

    said = unreadable_index_type(spec)
    assert said == (f"FAISS cannot read {spec!r} as an index type (could not parse {part} in {spec}); give flat, hnsw, "
                    "ivfpq, ivf-ondisk or a FAISS factory string, e.g. 'IVF1024,PQ48' or 'HNSW64,Flat'")
    _refused_as_the_flag_refuses_it(spec, said, width=384)


def test_a_readable_string_of_more_ivf_lists_than_memory_holds_is_left_to_the_build(monkeypatch):
    """'IVF2147483647,Flat' raised a raw MemoryError (std::bad_alloc) from IndexParams, and the 1-dimension parse of
    'IVF10000000,Flat' made its empty lists (1.6 GB): the parse now has one list an IVF, and the build's index is
    refused in words when its lists cannot be made."""
    from retriever.factory_parsing import _unreadable

    _unreadable.cache_clear()
    made = []
    factory = faiss.index_factory
    monkeypatch.setattr(faiss, "index_factory", lambda *arguments: made.append(arguments[1]) or factory(*arguments))
    IndexParams("IVF2147483647,Flat")
    IndexParams("PCA16,IVF16k_HNSW32,Flat")
    assert made == ["IVF1,Flat", "PCA16,IVF1_HNSW32,Flat"]
    with pytest.raises(RetrieverError, match=r"^FAISS cannot read 'PCA16,IVF4k,Flatt' as an index type \(could not "
                                             r"parse code description Flatt in IVF4k,Flatt\)"):
        IndexParams("PCA16,IVF4k,Flatt")
    with pytest.raises(RetrieverError, match="could not parse index string IVF16kM,Flat"):
        IndexParams("IVF16kM,Flat")  # a count FAISS does not read stays as it is
    monkeypatch.setattr(faiss, "index_factory", lambda *arguments: (_ for _ in ()).throw(MemoryError("std::bad_alloc")))
    with pytest.raises(RetrieverError, match=r"^FAISS ran out of memory making an empty 'IVF2147483647,Flat' index for "
                                             r"384-dimension vectors; give it more memory"):
        new_index("IVF2147483647,Flat", 384, IndexParams())

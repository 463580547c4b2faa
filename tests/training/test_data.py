"""Training examples from BEIR and JSONL, per-epoch sampling, and the collator's targets and mask."""
from __future__ import annotations

import json
import time

import pytest
import torch

from fixtures_corpora import TINY_DOCS, write_jsonl
from retriever.encoder import EncoderSettings
from retriever.errors import InputFileError, RetrieverError
from retriever.model_loading import load_tokenizer
from retriever.training.data import Collator, EpochGroups, epoch_groups, load_beir_examples, load_jsonl_examples
from retriever.training.examples import Passage, TrainExample
from retriever.training.loss import judged_positive_mask


@pytest.fixture()
def train_beir(tiny_beir):
    """tiny_beir with a train split: q1 has two positives (d6, d3), q2 shares d6, one grade-0 judgment."""
    (tiny_beir / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td6\t1\nq1\td3\t2\nq2\td6\t1\nq2\td4\t1\nq3\td10\t0\n", encoding="utf-8")
    return tiny_beir


def test_beir_examples_take_positive_judgments_and_corpus_text(train_beir):
    examples = {e.query_id: e for e in load_beir_examples(train_beir, "train")}
    assert set(examples) == {"q1", "q2"}  # q3's only judgment has grade 0
    assert [p.id for p in examples["q1"].positives] == ["d6", "d3"]
    assert examples["q1"].positives[0].text == "Bees the bee makes honey from a flower"
    assert examples["q1"].query == "where does honey come from"
    assert examples["q1"].judged == {"d6", "d3"} and examples["q1"].negatives == ()


def test_judged_queries_that_are_blank_are_skipped_and_counted(train_beir, capsys):
    """A BEIR query of "" or of characters the tokenizer drops was trained on (toward its positive, from nothing),
    where a JSONL line holding one is refused."""
    queries = [line for line in (train_beir / "queries.jsonl").read_text().splitlines()]
    blanked = {"q1": "", "q2": "\x01\u200b"}
    rows = [json.loads(line) for line in queries]
    write_jsonl(train_beir / "queries.jsonl", [{**row, "text": blanked.get(row["_id"], row["text"])} for row in rows])
    (train_beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td6\t1\nq2\td4\t1\n"
                                                    "q3\td1\t1\n", encoding="utf-8")
    assert [e.query_id for e in load_beir_examples(train_beir, "train")] == ["q3"]
    assert "2 judged queries missing from queries.jsonl or blank there were skipped" in capsys.readouterr().err
    (train_beir / "qrels" / "one.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td6\t1\nq3\td1\t1\n", encoding="utf-8")
    load_beir_examples(train_beir, "one")  # it said "1 judged queries ... were skipped"
    assert "1 judged query missing from queries.jsonl or blank there was skipped" in capsys.readouterr().err


def test_training_on_the_test_split_or_another_name_of_it_is_warned_about(train_beir, capsys):
    """`train --split test` trained on the queries results are reported on without a word (tuning the fusion on them
    is refused); a split whose qrels file is test's under another name is the same queries."""
    load_beir_examples(train_beir, "train")
    assert "warning" not in capsys.readouterr().err
    (train_beir / "qrels" / "heldout.tsv").symlink_to(train_beir / "qrels" / "test.tsv")
    for split in ("test", "heldout"):
        load_beir_examples(train_beir, split)
        assert capsys.readouterr().err.startswith(f"warning: training on the {split!r} split, whose queries results "
                                                  "are reported on: scores on it will overstate the model")


def test_negatives_of_queries_left_out_of_training_are_not_counted_as_used(tiny_beir, tmp_path, capsys):
    """A blank query (q1) and one whose positive is blank (q2) train on nothing: their negatives were counted as used,
    so no line was printed and the warning that none was usable pointed to a note "above" that never came."""
    (tiny_beir / "qrels" / "train.tsv").write_text("q1\td1\t1\nq2\td2\t1\nq3\td3\t1\nq4\td4\t1\n", encoding="utf-8")
    write_jsonl(tiny_beir / "queries.jsonl", [{"_id": "q1", "text": " "}, {"_id": "q2", "text": "dog"},
                                              {"_id": "q3", "text": "tea"}, {"_id": "q4", "text": "lava"}])
    write_jsonl(tiny_beir / "corpus.jsonl", [{"_id": i, "title": "" if i == "d2" else t, "text": "" if i == "d2"
                                              else x} for i, t, x in TINY_DOCS])
    negatives = write_jsonl(tmp_path / "neg.jsonl", [{"query_id": "q1", "negatives": ["d5", "d6"]},
                                                     {"query_id": "q2", "negatives": ["d7"]},
                                                     {"query_id": "q3", "negatives": ["d8"]}])
    examples = {e.query_id: e for e in load_beir_examples(tiny_beir, "train", negatives)}
    assert set(examples) == {"q3", "q4"} and [p.id for p in examples["q3"].negatives] == ["d8"]
    assert (f"hard negatives ({negatives}): 1 of 4 used; left out: 3 of queries left out of training above "
            "(2 queries)\n") in capsys.readouterr().err


def test_negatives_file_drops_judged_positives_and_unknown_ids_and_says_so(train_beir, tmp_path, capsys):
    negatives = write_jsonl(tmp_path / "neg.jsonl", [{"query_id": "q1", "negatives": ["d3", "d9", "nope", "d1"]},
                                                     {"query_id": "q2", "negatives": ["d6", "d5"]},
                                                     {"query_id": "qZZ", "negatives": ["d1", "d2"]}])
    examples = {e.query_id: e for e in load_beir_examples(train_beir, "train", negatives)}
    assert [p.id for p in examples["q1"].negatives] == ["d9", "d1"]
    assert [p.id for p in examples["q2"].negatives] == ["d5"]
    assert ("3 of 8 used; left out: 2 of queries without a positive in this split (1 query), 1 id not in the "
            "corpus or blank there, 2 judged relevant") in capsys.readouterr().err  # it said "(1 queries), 1 ids"


def test_queries_of_one_text_under_two_ids_share_their_judgments(train_beir, tmp_path, capsys):
    """SciFact's train split judges claims 89 and 90, one text, with other documents: a batch holding both pushed 90's
    row away from 89's positive, which its own row pulled up for the same text (a --negatives file mined for 90
    held it too), where a JSONL query on two lines already shared its judgments."""
    with (train_beir / "queries.jsonl").open("a", encoding="utf-8") as queries:
        queries.write('{"_id": "q5", "text": "where does honey come from"}\n')  # q1's text
    with (train_beir / "qrels" / "train.tsv").open("a", encoding="utf-8") as qrels:
        qrels.write("q5\td9\t1\n")
    negatives = write_jsonl(tmp_path / "neg.jsonl", [{"query_id": "q1", "negatives": ["d9", "d1"]}])
    examples = {e.query_id: e for e in load_beir_examples(train_beir, "train", negatives)}
    assert examples["q1"].judged == examples["q5"].judged == {"d6", "d3", "d9"}
    assert [p.id for p in examples["q5"].positives] == ["d9"] and examples["q2"].judged == {"d6", "d4"}
    assert [p.id for p in examples["q1"].negatives] == ["d1"]
    err = capsys.readouterr().err
    assert "1 of 2 used; left out: 1 judged relevant" in err
    assert ("2 judged queries hold the text of another judged otherwise (e.g. 'q1'); queries of one text share their "
            "judgments, so a positive of one is no negative of another") in err


@pytest.mark.parametrize("query_id", [True, 1.5, ["q1"]])
def test_a_negatives_query_id_that_is_no_id_is_refused_at_its_line(train_beir, tmp_path, query_id):
    negatives = write_jsonl(tmp_path / "neg.jsonl", [{"query_id": "q1", "negatives": ["d9"]},
                                                     {"query_id": query_id, "negatives": ["d1"]}])
    with pytest.raises(InputFileError, match="neg.jsonl:2: id field 'query_id' must be a string or an integer"):
        load_beir_examples(train_beir, "train", negatives)


@pytest.mark.parametrize("line", [{"query_id": "", "negatives": ["d1"]}, {"query_id": "q1", "negatives": ["d 1"]}])
def test_a_negatives_id_no_run_could_hold_is_refused_at_its_line(train_beir, tmp_path, line):
    negatives = write_jsonl(tmp_path / "neg.jsonl", [{"query_id": "q1", "negatives": ["d9"]}, line])
    with pytest.raises(InputFileError, match="neg.jsonl:2: bad id in field"):
        load_beir_examples(train_beir, "train", negatives)


def test_negatives_mined_from_another_split_are_refused(train_beir, tmp_path):
    negatives = write_jsonl(tmp_path / "neg.jsonl", [{"query_id": "q9", "negatives": ["d1"]}])
    with pytest.raises(RetrieverError, match="none of its query ids"):
        load_beir_examples(train_beir, "train", negatives)


def test_jsonl_strings_are_doc_ids_with_a_corpus_and_texts_without(tiny_beir, tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [
        {"query": "honey", "positives": ["d6"], "negatives": ["d1", {"text": "a bee text", "title": "T"}]},
        {"query": "honey", "positives": [{"id": "d3"}]},
    ])
    with_corpus = load_jsonl_examples(path, corpus=tiny_beir)
    assert with_corpus[0].positives[0] == Passage("d6", "Bees the bee makes honey from a flower")
    assert with_corpus[0].negatives[1].text == "T a bee text"
    assert with_corpus[0].judged == with_corpus[1].judged == {"d6", "d3"}  # same query text: shared judgments
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"query": "honey", "positives": ["d6"]}])
    as_text = load_jsonl_examples(plain)
    assert as_text[0].positives[0].text == "d6" and as_text[0].positives[0].id.startswith("text:")
    assert as_text[0].query_id == "line-1"


@pytest.mark.parametrize("row, corpus, message", [
    ({"query": "x", "positives": ["missing-id"]}, True, "train.jsonl:2: document id 'missing-id' is not in"),
    ({"query": "x", "positives": [{"id": "d1"}]}, False, "train.jsonl:2: passage 'd1' is given by id only"),
    ({"query": "x", "positives": []}, False, "train.jsonl:2: 'positives' is missing or empty"),
    ({"positives": ["a"]}, False, "train.jsonl:2: missing or empty 'query'"),
    ({"query": "\x01\u200b\ufffd", "positives": ["a"]}, False, "train.jsonl:2: missing or empty 'query'"),
    ({"query": "x", "positives": [{"text": ""}]}, False, "train.jsonl:2: empty passage or document id"),
    ({"query": "x", "positives": [{"text": " ", "title": ""}]}, False, "train.jsonl:2: empty passage"),
    ({"query": "x", "positives": ["a"], "query_id": True}, False, "train.jsonl:2: id field 'query_id' must be"),
    ({"query": "x", "positives": [{"id": 3.0}]}, True, "train.jsonl:2: id field 'id' must be a string or an int"),
    # an empty query id was taken (null was refused), and one with a space could be no run's or qrels' id
    ({"query": "x", "positives": ["a"], "query_id": ""}, False, "train.jsonl:2: bad id in field 'query_id': empty"),
    ({"query": "x", "positives": ["a"], "query_id": "q 1"}, False, "train.jsonl:2: bad id in field 'query_id'"),
    # a misspelt or foreign key was ignored: these hard negatives were left out with exit 0
    ({"query": "x", "positives": ["a"], "negs": ["b"]}, False, "train.jsonl:2: unknown key 'negs' \\(a line holds "
                                                               "query, positives, negatives, query_id\\)"),
    ({"query": "x", "positives": ["a"], "negative_passages": [{"text": "b"}]}, False,
     "train.jsonl:2: unknown key 'negative_passages'"),
])
def test_jsonl_errors_name_the_line(tiny_beir, tmp_path, row, corpus, message):
    path = write_jsonl(tmp_path / "train.jsonl", [{"query": "ok", "positives": ["d1"]}, row])
    with pytest.raises(InputFileError, match=message):
        load_jsonl_examples(path, corpus=tiny_beir if corpus else None)


def example(query_id: str, positives: list[str], negatives: list[str]) -> TrainExample:
    return TrainExample(query_id, f"query {query_id}", tuple(Passage(i, f"text {i}") for i in positives),
                        tuple(Passage(i, f"text {i}") for i in negatives), frozenset(positives))


def test_epoch_groups_depend_only_on_seed_and_epoch():
    examples = [example(f"q{i}", [f"p{i}", f"p{i}b"], [f"n{i}{j}" for j in range(5)]) for i in range(8)]
    first = epoch_groups(examples, epoch=0, seed=7, group_size=3)
    assert first == epoch_groups(examples, epoch=0, seed=7, group_size=3)
    assert first != epoch_groups(examples, epoch=1, seed=7, group_size=3)
    for group in first:
        assert len(group.passages) == 3
        assert group.passages[0].id.startswith("p") and all(p.id.startswith("n") for p in group.passages[1:])
    few = epoch_groups([example("q", ["p"], ["n1"])], epoch=0, seed=0, group_size=4)
    assert [p.id for p in few[0].passages] == ["p", "n1"]  # brings the one negative it has
    dataset = EpochGroups(examples, seed=7, group_size=3)
    dataset.set_epoch(1)
    assert [dataset[i] for i in range(len(dataset))] == epoch_groups(examples, epoch=1, seed=7, group_size=3)


def test_collator_targets_mask_and_prefixes(tiny_model_dir):
    settings = EncoderSettings(model=str(tiny_model_dir), query_prefix="query: ", passage_max_length=16)
    collator = Collator(load_tokenizer(str(tiny_model_dir)), settings)
    q1 = TrainExample("q1", "cat", (Passage("d1", "the cat sat"),), (Passage("d2", "a dog ran"),), frozenset({"d1"}))
    q2 = TrainExample("q2", "mat", (Passage("d1", "the cat sat"),), (), frozenset({"d1"}))
    groups = epoch_groups([q1, q2], epoch=0, seed=0, group_size=2)
    batch = collator(sorted(groups, key=lambda g: g.example.query_id))
    assert batch["targets"].tolist() == [0, 2]
    mask = judged_positive_mask(batch["judged_keys"], batch["passage_keys"], batch["targets"])
    assert mask.tolist() == [[False, False, True], [True, False, False]]
    assert batch["passage"]["input_ids"].shape[0] == 3
    decoded = collator.tokenizer.decode(batch["query"]["input_ids"][0], skip_special_tokens=True)
    assert decoded.startswith("query")


def test_collator_gives_the_tokenizers_own_ids_for_ordinary_texts(tiny_model_dir):
    """Bounded tokenisation changes nothing for texts that fit: same ids, masks and padding as one plain call."""
    tokenizer = load_tokenizer(str(tiny_model_dir))
    settings = EncoderSettings(model=str(tiny_model_dir), query_max_length=8, passage_max_length=16)
    long_text = " ".join(["the bee makes honey from a flower"] * 10)  # past 16 tokens: truncated
    long_query = "where does honey come from in the old city by the river"  # past 8 tokens
    examples = [TrainExample("q1", long_query, (Passage("d1", long_text),), (Passage("d2", "a dog ran"),),
                             frozenset({"d1"})),
                TrainExample("q2", "lava", (Passage("d3", "hot rock"),), (), frozenset({"d3"}))]
    groups = epoch_groups(examples, epoch=0, seed=0, group_size=2)
    batch = Collator(tokenizer, settings)(groups)
    queries = [g.example.query for g in groups]
    passages = [p.text for g in groups for p in g.passages]
    for side, texts, length in (("query", queries, 8), ("passage", passages, 16)):
        plain = tokenizer(texts, padding=True, truncation=True, max_length=length, return_tensors="pt")
        assert list(batch[side]) == list(plain)
        for key in plain:
            assert torch.equal(batch[side][key], plain[key]), (side, key)


class RecordingTokenizer:
    """A tokenizer that remembers the longest text it was handed."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.longest = tokenizer, 0

    def __call__(self, texts, **kwargs):
        self.longest = max([self.longest, *map(len, texts)])
        return self.tokenizer(texts, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_collator_reads_only_the_head_of_a_huge_passage(tiny_model_dir):
    """One multi-MB line in --train-jsonl used to be tokenised whole at every step (a minute and GBs per step)."""
    tokenizer = RecordingTokenizer(load_tokenizer(str(tiny_model_dir)))
    settings = EncoderSettings(model=str(tiny_model_dir), query_max_length=8, passage_max_length=16)
    huge = "lava is hot rock " * 250_000  # 4 MB
    example = TrainExample("q1", huge, (Passage("d1", huge),), (Passage("d2", "a dog ran"),), frozenset({"d1"}))
    started = time.perf_counter()
    batch = Collator(tokenizer, settings)(epoch_groups([example], epoch=0, seed=0, group_size=2))
    assert time.perf_counter() - started < 0.5
    assert tokenizer.longest < 1000
    assert batch["query"]["input_ids"].shape == (1, 8) and batch["passage"]["input_ids"].shape == (2, 16)


def test_collated_queries_read_special_token_text_as_the_search_encoder_does(tiny_model_dir):
    """A training query "[SEP] cat" was tokenized as the [SEP] control token, where search reads it as text."""
    from retriever.encoder import Encoder
    settings = EncoderSettings(model=str(tiny_model_dir), query_max_length=8)
    encoder = Encoder(settings, device="cpu", dtype="fp32")
    example = TrainExample("q1", "[SEP] cat", (Passage("d1", "the cat [SEP] sat"),), (), frozenset({"d1"}))
    batch = Collator(load_tokenizer(str(tiny_model_dir)), settings)(epoch_groups([example], epoch=0, seed=0,
                                                                                 group_size=1))
    searched = encoder._query_tokenizer()(["[SEP] cat"], truncation=True, max_length=8)["input_ids"][0]
    assert batch["query"]["input_ids"][0].tolist() == searched
    sep = encoder.tokenizer.sep_token_id
    assert batch["passage"]["input_ids"][0].tolist().count(sep) == 2  # passages still read it as [SEP]


def test_jsonl_negatives_that_are_positives_of_their_query_are_counted(tmp_path, capsys):
    """Dropped without a word, so `train` pointed to a note "above" that was never printed."""
    path = write_jsonl(tmp_path / "train.jsonl", [
        {"query": "cat", "positives": ["the cat"], "negatives": ["the cat", "a dog"]},
        {"query": "cat", "positives": ["the mat"], "negatives": ["the mat"]},
        {"query": "bee", "positives": ["honey"], "negatives": ["lava"]}])
    examples = load_jsonl_examples(path)
    assert [len(e.negatives) for e in examples] == [1, 0, 1]
    assert (f"hard negatives ({path}): 2 of 4 used; left out: 2 judged relevant (a positive of the same query)"
            in capsys.readouterr().err)


def test_a_passage_listed_twice_on_a_line_is_one_passage_of_its_group(tmp_path, capsys):
    """A negative listed twice (by text, or by id in a corpus) was sampled twice into one group: two columns of one
    text in the loss, and counted twice as given, where a --negatives file's repeats are read once."""
    path = write_jsonl(tmp_path / "train.jsonl", [
        {"query": "cat", "positives": ["the cat", "the cat"], "negatives": ["a dog", "a dog", "the cat", "lava"]},
        {"query": "bee", "positives": ["honey"], "negatives": [{"id": "n1", "text": "a wasp"}, {"id": "n1",
                                                                                            "text": "a wasp"}]}])
    examples = load_jsonl_examples(path)
    assert [[p.text for p in e.positives] for e in examples] == [["the cat"], ["honey"]]
    assert [[n.text for n in e.negatives] for e in examples] == [["a dog", "lava"], ["a wasp"]]
    assert f"hard negatives ({path}): 3 of 4 used; left out: 1 judged relevant" in capsys.readouterr().err
    for group in epoch_groups(examples, 0, 42, 4):
        assert len({p.id for p in group.passages}) == len(group.passages)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in TINY_DOCS])
    by_id = write_jsonl(tmp_path / "by-id.jsonl", [{"query": "cat", "positives": ["d1"], "negatives": ["d2", "d2"]}])
    assert [n.id for n in load_jsonl_examples(by_id, corpus)[0].negatives] == ["d2"]


@pytest.mark.parametrize("row, message", [
    # a misspelt title was dropped, and the passage trained without it
    ({"query": "x", "positives": [{"text": "a bee", "titel": "Bees"}]},
     "train.jsonl:2: unknown passage key 'titel' \\(a passage object holds text, title, id, _id, docid\\)"),
    # formats of other tools: the error names our key for theirs
    ({"query": "x", "positive_passages": [{"docid": "d6", "text": "a bee"}]},
     "unknown key 'positive_passages' .*; Tevatron's 'positive_passages' is 'positives' here"),
    ({"query": "x", "pos": ["a bee"], "neg": ["a dog"]}, "unknown key 'neg' .*; FlagEmbedding's 'neg' is 'negatives' here"),
])
def test_unknown_keys_of_passage_objects_are_refused_and_other_formats_keys_named(tmp_path, row, message):
    path = write_jsonl(tmp_path / "train.jsonl", [{"query": "ok", "positives": ["a cat"]}, row])
    with pytest.raises(InputFileError, match=message):
        load_jsonl_examples(path)


def test_a_tevatron_passage_objects_docid_is_its_id(tmp_path):
    """Tevatron names a passage's id `docid`: it was ignored, so a passage judged for two queries under its id
    was not known to be one passage unless its title and text were the same to the byte."""
    path = write_jsonl(tmp_path / "train.jsonl", [
        {"query_id": "q1", "query": "honey", "positives": [{"docid": "d6", "title": "Bees", "text": "a bee"}],
         "negatives": [{"docid": "d1", "title": "", "text": "a cat"}]}])
    example = load_jsonl_examples(path)[0]
    assert [p.id for p in (*example.positives, *example.negatives)] == ["d6", "d1"]


def test_a_blank_judged_or_negative_document_of_a_beir_split_is_left_out_and_counted(tmp_path, capsys):
    """A judged document whose title and text are empty or whitespace was trained on (its query pulled toward
    [CLS][SEP]) without a word, where a JSONL file's empty passage is refused and a blank query left out."""
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    write_jsonl(root / "corpus.jsonl", [{"_id": "d1", "title": "", "text": ""}, {"_id": "d2", "title": "Dogs",
                                         "text": "a dog ran"}, {"_id": "d3", "title": " ", "text": "\t"}])
    write_jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "cat"}, {"_id": "q2", "text": "dog"}])
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    (root / "negatives.jsonl").write_text('{"query_id": "q2", "negatives": ["d3", "d1"]}\n')
    examples = load_beir_examples(root, "train", root / "negatives.jsonl")
    assert [(e.query_id, [p.id for p in e.positives], e.negatives) for e in examples] == [("q2", ["d2"], ())]
    err = capsys.readouterr().err
    assert "training data: 1 judged document missing from the corpus or blank there" in err
    assert "2 ids not in the corpus or blank there" in err


def test_a_jsonl_line_naming_a_blank_corpus_document_is_refused_as_an_empty_passage_is(tmp_path):
    """With --corpus, an id whose document has an empty title and text was trained on as [CLS][SEP] without a word,
    where the same passage given inline is refused."""
    write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "d1", "title": "Dogs", "text": "a dog ran"},
                                            {"_id": "d2", "title": "", "text": " "}])
    write_jsonl(tmp_path / "train.jsonl", [{"query": "dog", "positives": ["d1"]},
                                           {"query": "cat", "positives": ["d1"], "negatives": ["d2"]}])
    with pytest.raises(InputFileError, match=r"train.jsonl:2: document 'd2' of the corpus .* has a blank title and "
                                             r"text; fix it in the corpus, or leave it out of this line$"):
        load_jsonl_examples(tmp_path / "train.jsonl", tmp_path / "corpus.jsonl")


def test_only_the_first_process_of_a_launch_says_what_the_data_lacks(tmp_path, capsys, monkeypatch):
    """Every torchrun process reads the same data, and each printed the same lines about it: a copy per process."""
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    write_jsonl(root / "corpus.jsonl", [{"_id": "d1", "title": "Dogs", "text": "a dog ran"}])
    write_jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "dog"}])
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td9\t1\n")
    (root / "negatives.jsonl").write_text('{"query_id": "q1", "negatives": ["d8"]}\n')
    monkeypatch.setenv("RANK", "1")
    load_beir_examples(root, "test", root / "negatives.jsonl")
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    load_beir_examples(root, "test", root / "negatives.jsonl")
    assert [line.split(":")[0] for line in capsys.readouterr().err.splitlines()] == [
        "warning", "training data", f"hard negatives ({root / 'negatives.jsonl'})"]


@pytest.mark.parametrize("content", ["", "\n \n"])
def test_an_empty_negatives_file_is_refused_not_trained_without_a_word(train_beir, tmp_path, content):
    """It trained on in-batch negatives only, warning of 'none given, or none left: see above' with nothing above,
    where an empty qrels or run file is refused."""
    path = tmp_path / "neg.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RetrieverError, match=f"^{path}: the negatives file holds no line; "):
        load_beir_examples(train_beir, "train", path)

"""The warm-up failure's one line: the index named, a RetrieverError's own advice kept, anything else a hint."""
from retriever.errors import RetrieverError
from retriever.serving.batch_errors import QueryRejected, warm_up_failure


def test_a_warm_up_failure_names_the_index_and_keeps_a_retriever_errors_advice():
    said = warm_up_failure("tiny", RetrieverError("index.ivfdata: the index folder is damaged; rebuild it"))
    assert str(said) == "index 'tiny' failed its warm-up search: index.ivfdata: the index folder is damaged; rebuild it"


def test_a_query_rejection_at_warm_up_is_reported_by_its_cause_not_as_a_clients_query():
    try:
        try:
            raise IndexError("doc-store row out of range")
        except IndexError as cause:
            raise QueryRejected("the encoder failed on this query (IndexError); send a shorter text") from cause
    except QueryRejected as rejected:
        said = str(warm_up_failure("tiny", rejected))
    assert said.startswith("index 'tiny' failed its warm-up search (IndexError: doc-store row out of range); its files")
    assert "send a shorter" not in said

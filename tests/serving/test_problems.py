"""pydantic's errors as the client's one line (``retriever.serving.problems``)."""
from retriever.serving.problems import MAX_PROBLEMS, clipped, validation_message


def test_a_long_list_of_problems_names_the_first_few_and_counts_the_rest():
    errors = [{"loc": ("body", "queries", i), "msg": "Input should be a valid string"} for i in range(MAX_PROBLEMS + 3)]
    said = validation_message(errors)
    assert said.startswith("queries.0: Input should be a valid string; queries.1:")
    assert said.endswith("; and 3 more problems like these")


def test_a_k_of_thousands_of_digits_gets_the_range_message_a_shorter_one_gets():
    error = {"loc": ("query", "k"), "type": "int_parsing_size", "input": "9" * 5000, "msg": "Unable to parse"}
    assert validation_message([error]) == "k: Input should be less than or equal to 1000"


def test_a_name_a_client_sent_is_cut_short():
    assert clipped("x" * 200) == "x" * 60 + "..." and clipped("k") == "k"


def test_a_name_outside_the_pattern_is_worded_for_the_client_not_as_the_regex():
    """It said "name: String should match pattern '^[\\\\p{L}\\\\p{M}\\\\p{N}_-]{1,64}$'"."""
    error = {"loc": ("path", "name"), "type": "string_pattern_mismatch", "input": "a.b", "msg": "String should match"}
    said = validation_message([error])
    assert said == ("name: 'a.b' is no index name: names are 1-64 letters or digits (of any script), '_' or '-' "
                    "(GET /indexes lists them)")

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


def test_a_body_that_is_no_json_object_says_what_it_is_not_the_models_class_name():
    """It said "Input should be a valid dictionary or instance of SearchBody", a class no client knows."""
    from pydantic import ValidationError

    from retriever.serving.schemas import SearchBody

    said = {}
    for body in (None, "cat", ["cat"], 5, True):
        try:
            SearchBody.model_validate(body)
        except ValidationError as error:
            said[repr(body)] = validation_message(error.errors())
    assert said["['cat']"] == 'the body is a JSON array, not an object: send one such as {"queries": ["..."]}'
    assert [line.split(",")[0] for line in said.values()] == [
        "the body is a JSON null", "the body is a JSON string", "the body is a JSON array", "the body is a JSON number",
        "the body is a JSON boolean"]


def test_a_body_key_meant_for_the_path_or_the_server_says_where_it_goes():
    """``{"queries": [...], "index": "b"}`` said only "index: Extra inputs are not permitted", naming no way to search
    another index; ``"alpha"`` none to set the fusion."""
    from pydantic import ValidationError

    from retriever.serving.schemas import SearchBody

    said = {}
    for key in ("index", "alpha", "rrf_k", "x"):
        try:
            SearchBody.model_validate({"queries": ["cat"], key: 1})
        except ValidationError as error:
            said[key] = validation_message(error.errors())
    assert said == {"index": "index: Extra inputs are not permitted (an index is searched at /indexes/NAME/search)",
                    "alpha": "alpha: Extra inputs are not permitted (alpha is set when the server starts: retriever "
                             "serve --alpha)",
                    "rrf_k": "rrf_k: Extra inputs are not permitted (rrf_k is set when the server starts: retriever "
                             "serve --rrf-k)",
                    "x": "x: Extra inputs are not permitted"}


def test_a_lone_surrogate_in_a_body_key_or_mode_is_named_as_the_querys_is():
    """pydantic cannot read a key holding a lone surrogate (JSON `{"\\udfff": 1}`) and says so with no location: "Input
    should be a valid string, unable to parse raw data as a unicode string", naming neither key nor character, where
    a query's lone surrogate is named with its place."""
    import pytest
    from pydantic import ValidationError

    from retriever.serving.schemas import SearchBody

    for body, said in [({"queries": ["cat"], "x\udfff": 1},
                        "a key of the body has a lone surrogate U+DFFF at character 2, which is not valid Unicode text"),
                       ({"queries": ["cat"], "mode": "\ud800"},
                        "mode: the value has a lone surrogate U+D800 at character 1, which is not valid Unicode text")]:
        with pytest.raises(ValidationError) as refused:
            SearchBody.model_validate(body)
        assert validation_message(refused.value.errors()) == said

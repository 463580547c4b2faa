from __future__ import annotations

import pytest

from retriever.corpus import BeirDataset
from retriever.errors import RetrieverError
from retriever.evaluation import judged_split

HEADER = "query-id\tcorpus-id\tscore\n"


def test_a_split_judging_only_queries_the_queries_file_lacks_names_the_ids_not_the_grades(tiny_beir) -> None:
    """It said the split had no relevant judgment, sending the user to the grades when the ids differed."""
    (tiny_beir / "qrels" / "dev.tsv").write_text(HEADER + "PLAIN-1\td6\t1\nPLAIN-2\td4\t2\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match=r"none of the 2 queries split 'dev' judges \(e.g. 'PLAIN-1', 'PLAIN-2'\) "
                                             r"is in queries.jsonl \(ids e.g. 'q1', .*same query ids"):
        judged_split(BeirDataset.open(tiny_beir), "dev")
    (tiny_beir / "qrels" / "zero.tsv").write_text(HEADER + "q1\td6\t0\n", encoding="utf-8")
    with pytest.raises(RetrieverError, match="no query of split 'zero' has a relevant judgment .*grade column"):
        judged_split(BeirDataset.open(tiny_beir), "zero")

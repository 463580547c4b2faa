"""`python -m retriever` is the `retriever` command."""
from retriever.cli import main

main()

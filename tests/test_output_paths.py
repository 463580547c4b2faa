"""Output paths checked before any work: what could never be opened and written as a file is named."""
from __future__ import annotations

import socket


def test_a_socket_is_refused_before_any_work(tmp_path):
    """`-o SOCKET` was opened after the search or evaluation: 'no such device or address; check the disk'."""
    from retriever.output_paths import output_file_problem

    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "sock"))
        assert output_file_problem(tmp_path / "sock") == (f"{tmp_path / 'sock'} is a socket, which cannot be opened "
                                                          "as a file; give another path")

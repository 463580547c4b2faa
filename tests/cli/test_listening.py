"""`retriever serve --host`: a URL or a host with its port is a usage error naming the flags to give instead."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from retriever.cli import main


@pytest.mark.parametrize("host, advice", [
    ("127.0.0.1:8000", "--host 127.0.0.1 --port 8000"), ("localhost:9000", "--host localhost --port 9000"),
    ("http://localhost", "--host localhost (a port goes in --port)"), ("https://0.0.0.0:8443/", "--host 0.0.0.0 --port 8443"),
    ("[::1]:8000", "--host ::1 --port 8000"), ("http://[::1]:80/search", "--host ::1 --port 80"),
    ("localhost/", "--host localhost (a port goes in --port)"), ("http://", "--host NAME (a port goes in --port)"),
])
def test_a_host_given_with_a_scheme_or_port_is_a_usage_error_before_any_index_loads(tmp_path, monkeypatch, host,
                                                                                     advice):
    """`--host 127.0.0.1:8000` or `--host http://localhost` got only `cannot listen on http://localhost:8000 (Name or
    service not known): check --host and --port`, exit 1, after the flags were taken."""
    monkeypatch.setattr("retriever.cli.serving.listening_sockets", lambda *args: pytest.fail("serve went on"))
    result = CliRunner().invoke(main, ["serve", str(tmp_path), "--host", host])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith(
        f"error: Invalid value for '--host': {host!r} is not a bare host name or address: give {advice}"), result.output


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]", "localhost", "fe80::1%lo", ""])
def test_bare_hosts_are_taken(tmp_path, monkeypatch, host):
    taken = []
    monkeypatch.setattr("retriever.cli.serving.listening_sockets", lambda host, port: taken.append(host) or 1 / 0)
    CliRunner().invoke(main, ["serve", str(tmp_path), "--host", host])
    assert taken == [host.strip("[]")]

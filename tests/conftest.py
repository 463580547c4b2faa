"""The suite's root conftest: no test reaches the network, and the fixture modules are registered here.

Fixtures and helpers live in plain modules beside this file, one a theme: tiny BERTs (fixtures_models), corpora
(fixtures_corpora), flat indexes of them (fixtures_indexes), the on-disk IVF build (fixtures_ondisk), the machine
as tests see it (fixtures_system), CLI processes (fixtures_processes) and training checkpoints and losses
(fixtures_training). Their fixtures reach every test through ``pytest_plugins`` (pytest takes it only in the
rootdir's conftest, this one); a test imports their helpers by the module's plain name, ``from fixtures_models import
make_tiny_bert``, as pytest puts this folder on sys.path."""
from __future__ import annotations

import os
import signal

# Before huggingface_hub is imported (it reads this once): no test may reach the network, and a hub id
# that cannot be resolved must fail at once instead of after minutes of retries.
os.environ["HF_HUB_OFFLINE"] = "1"

# A suite started as a background job (`pytest &` in a script) inherits SIGINT ignored, as POSIX has such jobs, and
# so would every process it starts: the Ctrl-C tests then saw no KeyboardInterrupt. Python's own handler, as in a
# terminal; processes the suite starts get SIGINT at its default (exec resets a caught signal).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = ["fixtures_models", "fixtures_corpora", "fixtures_indexes", "fixtures_ondisk", "fixtures_system",
                  "fixtures_processes", "fixtures_training"]

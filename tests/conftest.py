"""The suite's root conftest: no test reaches the network, and the fixture modules are registered here.

Fixtures and helpers live in plain modules beside this file, one a theme: tiny BERTs (fixtures_models), corpora
(fixtures_corpora), flat indexes of them (fixtures_indexes), the on-disk IVF build (fixtures_ondisk), the machine
as tests see it (fixtures_system), CLI processes (fixtures_processes) and training checkpoints and losses
(fixtures_training). Their fixtures reach every test through ``pytest_plugins`` (pytest takes it only in the
rootdir's conftest, this one); a test imports their helpers by the module's plain name, ``from fixtures_models import
make_tiny_bert``, as pytest puts this folder on sys.path."""
from __future__ import annotations

import os

# Before huggingface_hub is imported (it reads this once): no test may reach the network, and a hub id
# that cannot be resolved must fail at once instead of after minutes of retries.
os.environ["HF_HUB_OFFLINE"] = "1"

pytest_plugins = ["fixtures_models", "fixtures_corpora", "fixtures_indexes", "fixtures_ondisk", "fixtures_system",
                  "fixtures_processes", "fixtures_training"]

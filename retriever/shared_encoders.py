"""Query encoders that served indexes share: one loaded copy of a model's weights for every index built with it."""
from __future__ import annotations

import os
import threading

from retriever.encoder import Encoder
from retriever.encoder_settings import QUERY_SETTINGS, EncoderSettings


class SharedEncoders:
    """Query encoders loaded once for all who ask for the same one, so serving several indexes built with one model
    holds one copy of its weights, not one per index. The same: equal ``QUERY_SETTINGS`` (passage settings shape no
    query vector; the model folder compared by its real path), device, dtype, batch size and the weights the index
    records (``weights_sha256``: an index built after the folder's weights changed gets a load of its own). Each
    gets ``Encoder.for_queries``, its query vectors bit for bit. Encoding only reads the model: threads may share."""

    def __init__(self) -> None:
        self.loaded: dict[tuple, Encoder] = {}
        self._lock = threading.Lock()

    def get(self, settings: EncoderSettings, device: str = "auto", dtype: str = "auto",
            batch_size: int | None = None, weights_sha256: str | None = None) -> Encoder:
        """The query encoder of these settings and recorded weights, loaded on the first call that asks for it."""
        model = os.path.realpath(settings.model) if os.path.isdir(settings.model) else settings.model
        query = tuple(getattr(settings, name) for name in QUERY_SETTINGS)
        key = (model, query, device, dtype, batch_size, weights_sha256)
        with self._lock:
            if key not in self.loaded:
                self.loaded[key] = Encoder(settings, device=device, dtype=dtype, batch_size=batch_size)
            return self.loaded[key].for_queries(settings)

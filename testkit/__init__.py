"""Fakes that tests, the benchmark and the chaos script share: a local server speaking the
Messages API's SSE wire format (``model_server``), the product under Daphne in a
subprocess (``live``) and a small client of its HTTP + SSE API (``api_client``). Test
support, not product: nothing under ``agent/`` imports it."""

"""`/generate_text` answers with `usage` through a served app and a real `gradio_client` (issue 45, part 2): the same
prompt sent twice, the second answer's prompt tokens restored from the server's prefix cache, the same tokens."""

from __future__ import annotations

import pytest

from tests.ui_fixtures import save_tiny_decoder, script_client, served_app

PROMPT = ("the quick brown fox jumps over the lazy dog; " * 6)[:225]  # 225 tokens of the character tokenizer


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    with served_app(weights, tmp_path_factory.mktemp("uploads")) as app, script_client(app[1]) as c:
        yield c


def test_the_same_prompt_twice_says_what_was_reused(client):
    first, second = (client.predict("tiny-lm", PROMPT, "max_new_tokens=5", api_name="/generate_text") for _ in range(2))
    assert first["usage"] == {"prompt_tokens": 225, "cached_tokens": 0, "completion_tokens": 5}
    assert second["usage"] == {"prompt_tokens": 225, "cached_tokens": 224, "completion_tokens": 5}
    assert second["token_ids"] == first["token_ids"] and len(first["token_ids"]) == 5

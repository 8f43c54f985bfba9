"""`/generate_text` answers with `usage` through a served app and a real `gradio_client` (issue 45, part 2): the same
prompt of any length sent twice, the second answer's prompt tokens all restored from the server's prefix cache (its
blocks and its tail, with the first token's logits), the same tokens, greedy or sampled with a seed."""

from __future__ import annotations

import pytest

from tests.ui_fixtures import save_tiny_decoder, script_client, served_app

PROMPT = ("the quick brown fox jumps over the lazy dog; " * 6)[:225]  # 225 tokens of the character tokenizer


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    folder = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(folder / "tiny-lm")
    return folder


@pytest.fixture(scope="module")
def client(weights, tmp_path_factory):
    with served_app(weights, tmp_path_factory.mktemp("uploads")) as app, script_client(app[1]) as c:
        yield c


GREEDY, SAMPLED = "max_new_tokens=5", "max_new_tokens=6&mode=sample&temperature=0.9&seed=11"


# The app (and its prefix store) serves every case: each prompt starts with a character of its own, so no case
# finds another's blocks and each first answer is a fresh run's.
@pytest.mark.parametrize(("first_char", "length", "query"), [
    ("a", 7, GREEDY), ("b", 40, GREEDY), ("c", 225, GREEDY), ("d", 7, SAMPLED), ("e", 40, SAMPLED), ("f", 225, SAMPLED),
])
def test_the_same_prompt_twice_says_what_was_reused(client, first_char, length, query):
    prompt = (first_char + PROMPT)[:length]
    first, second = (client.predict("tiny-lm", prompt, query, api_name="/generate_text") for _ in range(2))
    assert first["usage"]["prompt_tokens"] == length and first["usage"]["cached_tokens"] == 0
    assert second["usage"] == {**first["usage"], "cached_tokens": length}
    assert second["token_ids"] == first["token_ids"] and len(first["token_ids"]) == first["usage"]["completion_tokens"]


def test_every_answer_says_how_it_decoded(client):
    """`decoding` (issue "one step serves the class", item 5): this server loads without `--compile`, so its runs
    decode in the shared batch's eager passes and say so, with the rows their passes had."""
    answer = client.predict("tiny-lm", "gone with the wind", "max_new_tokens=4", api_name="/generate_text")
    assert answer["decoding"] == {"captured": False, "rows": 1, "backend": "eager",
                                  "reason": "the model was loaded without compile=True"}
    beams = client.predict("tiny-lm", "gone with the wind", "max_new_tokens=4&mode=beam&num_beams=3",
                           api_name="/generate_text")
    assert beams["decoding"]["rows"] == 3 and beams["decoding"]["backend"] == "eager"


def test_a_blended_prompt_cache_is_a_setting_of_the_query(client, weights):
    """`cache_blend` (the cache-reuse lab's fork) in a script's settings query: the answer is the model's own decode
    from the blended prompt cache, not the plain run's, and no prefix block is read for it."""
    import playground
    from playground.generation import GenerationConfig, generate_all

    prompt = "the quick brown fox\njumps over the lazy dog\nand then? "
    answer = client.predict("tiny-lm", prompt, "max_new_tokens=6&cache_blend=tokens:4@30", api_name="/generate_text")
    lm = playground.load_model(weights / "tiny-lm")
    blended = generate_all(lm, prompt, GenerationConfig(max_new_tokens=6, cache_blend="tokens:4@30"))
    plain = generate_all(lm, prompt, GenerationConfig(max_new_tokens=6))
    assert answer["token_ids"] == blended.token_ids and blended.token_ids != plain.token_ids
    assert answer["usage"]["cached_tokens"] == 0 and answer["notes"] == []

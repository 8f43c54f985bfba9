"""Which checkpoints the app offers, and the only way a name from the browser becomes a path.

Visitors are private to each other at the catalog level: uploads and Hub downloads per owner, time
to live, disk quota, end of session, and the preloaded SmolLM2 found in the Hugging Face cache."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

import playground
from playground.app import catalog as catalog_module
from playground.app.catalog import Catalog
from playground.app.names import PRIVATE_HUB, PRIVATE_UPLOAD
from playground.app.registry import ModelRegistry
from playground.app.uploads import HUB_PREFIX, UPLOAD_PREFIX, remove_sources
from playground.errors import PlaygroundError
from tests.hf_tiny import gemma3_like, gpt2_like, llama_like, save_decoder, save_seq2seq, t5_like
from tests.ui_fixtures import save_tiny_decoder

ROOT = Path(__file__).resolve().parents[2]
ALICE, BOB, CAROL = "session-hash-alice", "session-hash-bob", "session-hash-carol"


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(root / "tiny-lm")
    return root


def test_catalog_lists_defaults_first_and_resolves_only_inside_its_folders(weights, tmp_path):
    (weights / "aaa-other").mkdir(exist_ok=True)
    (weights / "aaa-other" / "model.safetensors").write_bytes(b"x")
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "model.safetensors").write_bytes(b"x")
    link = weights / "escape"
    if not link.exists():
        link.symlink_to(outside)
    try:
        cat = Catalog(weights, tmp_path / "uploads")
        assert cat.names()[0] == "tiny-lm" and cat.default_name() == "tiny-lm"
        labels = {lang: {e.name: e.label for e in cat.entries(None, lang)} for lang in ("en", "zh")}
        assert labels["en"]["tiny-lm"].startswith("tiny-lm (default decoder)")
        assert labels["zh"]["tiny-lm"].startswith("tiny-lm (默认解码器)")
        assert cat.resolve("tiny-lm") == (weights / "tiny-lm").resolve()
        for bad in ("../secret", "/etc/passwd", "tiny-lm/../../secret", "escape", "", "a\\b", "x/y/z",
                    UPLOAD_PREFIX + "../../etc", UPLOAD_PREFIX + "0" * 32):
            with pytest.raises(PlaygroundError):
                cat.resolve(bad)
    finally:
        link.unlink()
        (weights / "aaa-other" / "model.safetensors").unlink()
        (weights / "aaa-other").rmdir()


def test_uploads_are_copied_into_their_own_folder_and_checked(tmp_path):
    cat = Catalog(tmp_path / "w", tmp_path / "uploads")
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"0" * 100)
    (src / "config.json").write_text("{}")
    a = cat.save_upload([src / "model.safetensors", src / "config.json"], max_bytes=10_000)
    b = cat.save_upload([src / "model.safetensors"], max_bytes=10_000)
    assert a != b and a in cat.names() and b in cat.names()
    assert sorted(p.name for p in cat.resolve(a).iterdir()) == ["config.json", "model.safetensors"]
    (src / "model.bin").write_bytes(b"x")
    (src / "run.py").write_text("print(1)")
    with pytest.raises(PlaygroundError, match="pickle"):
        cat.save_upload([src / "model.bin"], max_bytes=10_000)
    with pytest.raises(PlaygroundError, match="not accepted"):
        cat.save_upload([src / "model.safetensors", src / "run.py"], max_bytes=10_000)
    with pytest.raises(PlaygroundError, match="no .safetensors"):
        cat.save_upload([src / "config.json"], max_bytes=10_000)
    with pytest.raises(PlaygroundError, match="limit"):
        cat.save_upload([src / "model.safetensors"], max_bytes=10)
    cat.discard_upload(b)
    assert b not in cat.names()


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A real tiny checkpoint folder (config.json + model.safetensors)."""
    directory = tmp_path_factory.mktemp("tiny")
    save_decoder(directory, "llama", llama_like(num_hidden_layers=1, hidden_size=16, intermediate_size=24,
                                                num_attention_heads=2, num_key_value_heads=1, vocab_size=31))
    return directory


@pytest.fixture
def catalog(tmp_path) -> Catalog:
    return Catalog(ROOT / "weights", tmp_path / "uploads", tmp_path / "hub", private=True, ttl_seconds=600,
                   quota_bytes=10**9, hf_cache_dir=tmp_path / "hf-cache", clock=Clock())


def _gradio_temp(tmp_path: Path, source: Path, name: str) -> Path:
    """Where Gradio keeps an upload: a folder of its own per file."""
    folder = tmp_path / "gradio" / os.urandom(8).hex()
    folder.mkdir(parents=True)
    shutil.copy(source, folder / name)
    return folder / name


def test_an_upload_is_listed_and_loadable_only_for_its_owner(catalog, tiny, tmp_path):
    files = [_gradio_temp(tmp_path, tiny / n, n) for n in ("config.json", "model.safetensors")]
    name = catalog.save_upload(files, 10**8, ALICE)
    assert name.startswith(UPLOAD_PREFIX)
    assert name in catalog.names(ALICE) and name not in catalog.names(BOB)
    # Named by what it is and its size (issue 23), plus a random part that keeps each upload apart.
    kind = json.loads((tiny / "config.json").read_text())["model_type"]
    size = (tiny / "model.safetensors").stat().st_size
    assert 10_000 <= size < 1_000_000
    shown = f"{size / 1000:.0f}KB"
    assert re.fullmatch(rf"{UPLOAD_PREFIX}{kind}-{shown}-[0-9a-f]{{12}}", name), name
    alice_labels = [e.label for e in catalog.entries(ALICE) if e.name == name]
    assert alice_labels == [f"uploaded: {kind} · {shown} · model.safetensors [{name[-12:-6]}]"]
    zh_labels = [e.label for e in catalog.entries(ALICE, "zh") if e.name == name]  # the page in 中文
    assert zh_labels == [f"已上传:{kind} · {shown} · model.safetensors [{name[-12:-6]}]"]
    bob_text = " ".join(f"{e.name} {e.label}" for e in catalog.entries(BOB))
    assert name[-12:] not in bob_text and "uploaded" not in bob_text
    path = catalog.resolve(name, ALICE)
    assert playground.load_model(path).config.n_layers == 1
    for other in (BOB, "", None):
        with pytest.raises((PlaygroundError, ValueError)) as caught:
            catalog.resolve(name, other)
        if other == BOB:
            assert str(caught.value) == PRIVATE_UPLOAD
    # An id nobody uploaded, and a malformed one, read exactly the same: names cannot be probed.
    for probe in (UPLOAD_PREFIX + "0" * 32, UPLOAD_PREFIX + "../../etc/passwd", UPLOAD_PREFIX + name[-32:].upper()):
        with pytest.raises(PlaygroundError) as caught:
            catalog.resolve(probe, BOB)
        assert str(caught.value) == PRIVATE_UPLOAD


def test_upload_names_carry_only_safe_characters_of_the_kind(catalog, tiny, tmp_path):
    """The kind comes from the visitor's config.json (markup and odd characters become '_') or, without
    one, from the weights file's name; the name still resolves only for its owner."""
    config = json.loads((tiny / "config.json").read_text())
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / "config.json").write_text(json.dumps({**config, "model_type": '<img src=x onerror="alert(1)">/../..'}))
    name = catalog.save_upload([_gradio_temp(tmp_path, hostile / "config.json", "config.json"),
                                _gradio_temp(tmp_path, tiny / "model.safetensors", "model.safetensors")], 10**8, ALICE)
    assert re.fullmatch(rf"{UPLOAD_PREFIX}img_src_x_onerror_alert_1-\d+KB-[0-9a-f]{{12}}", name), name
    assert catalog.resolve(name, ALICE).is_dir()
    bare = catalog.save_upload([_gradio_temp(tmp_path, tiny / "model.safetensors", "tiny-v2.safetensors")], 10**8, ALICE)
    assert re.fullmatch(rf"{UPLOAD_PREFIX}tiny_v2-\d+KB-[0-9a-f]{{12}}", bare), bare


def test_the_same_bytes_uploaded_by_two_visitors_are_two_models(catalog, tiny):
    a = catalog.save_upload([tiny / "config.json", tiny / "model.safetensors"], 10**8, ALICE)
    b = catalog.save_upload([tiny / "config.json", tiny / "model.safetensors"], 10**8, BOB)
    registry = ModelRegistry(capacity=4)
    lm_a = registry.get(catalog.resolve(a, ALICE))
    lm_b = registry.get(catalog.resolve(b, BOB))
    assert lm_a is not lm_b and registry.loads == 2
    shipped = [registry.get(catalog.resolve("tiny-lm", owner)) for owner in (ALICE, BOB)]
    assert shipped[0] is shipped[1] and registry.loads == 3  # shipped checkpoints stay shared
    assert catalog.is_shared(catalog.resolve("tiny-lm", ALICE)) and not catalog.is_shared(catalog.resolve(a, ALICE))


def test_two_visitors_uploading_the_same_bytes_share_gradio_s_path_and_both_succeed(catalog, tiny, tmp_path):
    # Gradio stores an upload under the hash of its bytes: both visitors send the same path.
    files = [_gradio_temp(tmp_path, tiny / n, n) for n in ("config.json", "model.safetensors")]
    a = catalog.save_upload(files, 10**8, ALICE)
    b = catalog.save_upload(files, 10**8, BOB)
    assert all(f.exists() for f in files)  # left for Gradio's cache cleaner
    pa, pb = catalog.resolve(a, ALICE), catalog.resolve(b, BOB)
    assert pa != pb
    for path in (pa, pb):
        assert (path / "model.safetensors").read_bytes() == (tiny / "model.safetensors").read_bytes()
    catalog.discard_upload(a, ALICE)
    assert not pa.exists() and (pb / "model.safetensors").is_file() and all(f.exists() for f in files)


def test_refused_uploads_leave_nothing_behind(catalog, tiny, tmp_path):
    pickle_file = _gradio_temp(tmp_path, tiny / "config.json", "model.bin")
    with pytest.raises(PlaygroundError, match="pickle"):
        catalog.save_upload([pickle_file], 10**8, ALICE)
    remove_sources([pickle_file])  # what the page does with a refused upload
    assert not pickle_file.exists() and not pickle_file.parent.exists()
    big = _gradio_temp(tmp_path, tiny / "model.safetensors", "model.safetensors")
    with pytest.raises(PlaygroundError, match="limit"):
        catalog.save_upload([big], 10, ALICE)
    with pytest.raises(PlaygroundError, match="no longer on the server; upload it again"):
        catalog.save_upload([pickle_file.with_name("model.safetensors")], 10**8, ALICE)
    assert catalog.names(ALICE) == catalog.names(BOB)  # nothing stored
    name = catalog.save_upload([tiny / "model.safetensors"], 10**8, ALICE)  # weights without config: fails to load
    path = catalog.resolve(name, ALICE)
    with pytest.raises(PlaygroundError):
        playground.load_model(path)
    assert catalog.discard_upload(name, BOB) is None and path.exists()  # not Bob's to delete
    assert catalog.discard_upload(name, ALICE) == path and not path.exists()


def test_uploads_expire_after_their_last_use(catalog, tiny):
    clock = catalog.uploads.clock
    old = catalog.save_upload([tiny / "config.json", tiny / "model.safetensors"], 10**8, ALICE)
    clock.now += 500
    catalog.resolve(old, ALICE)  # used: its hour starts again
    kept = catalog.save_upload([tiny / "config.json", tiny / "model.safetensors"], 10**8, BOB)
    clock.now += 400  # 900 s after the first upload, 400 s after its last use
    assert old in catalog.names(ALICE) and kept in catalog.names(BOB)
    clock.now += 300  # 700 s since the last use of both
    removed = catalog.uploads.sweep()
    assert len(removed) == 2 and old not in catalog.names(ALICE) and kept not in catalog.names(BOB)
    with pytest.raises(PlaygroundError, match="deleted after its time without use"):  # its owner is told why
        catalog.resolve(old, ALICE)
    with pytest.raises(PlaygroundError, match=PRIVATE_UPLOAD):  # anyone else learns nothing
        catalog.resolve(old, BOB)


def test_the_quota_evicts_the_least_recently_used_first(tiny, tmp_path):
    size = (tiny / "model.safetensors").stat().st_size
    clock = Clock()
    catalog = Catalog(ROOT / "weights", tmp_path / "uploads", tmp_path / "hub", private=True, ttl_seconds=10**6,
                      quota_bytes=int(2.5 * size), owner_quota_bytes=int(2.5 * size), clock=clock)
    names = []
    for owner in (ALICE, BOB, ALICE):
        clock.now += 10
        names.append((owner, catalog.save_upload([tiny / "model.safetensors"], 10**9, owner)))
    assert [n in catalog.names(o) for o, n in names] == [False, True, True]  # the oldest went
    clock.now += 10
    catalog.resolve(names[1][1], BOB)  # Bob's is now the most recently used
    clock.now += 10
    catalog.save_upload([tiny / "model.safetensors"], 10**9, BOB)
    assert names[1][1] in catalog.names(BOB) and names[2][1] not in catalog.names(ALICE)
    with pytest.raises(PlaygroundError, match="more than this server keeps"):
        catalog.uploads.make_room(3 * size)


def test_each_owner_keeps_a_share_and_uploads_in_use_are_never_evicted(tiny, tmp_path):
    size = (tiny / "model.safetensors").stat().st_size
    clock = Clock()
    catalog = Catalog(ROOT / "weights", tmp_path / "uploads", tmp_path / "hub", private=True, ttl_seconds=10**6,
                      quota_bytes=int(3.5 * size), owner_quota_bytes=int(2.5 * size), clock=clock)
    weights = [tiny / "model.safetensors"]
    clock.now += 10
    alices = catalog.save_upload(weights, 10**9, ALICE)
    catalog.uploads.in_use = lambda: [catalog.stored_path(alices, ALICE)]  # Alice's tab has it open
    bobs = []
    for _ in range(4):
        clock.now += 10
        bobs.append(catalog.save_upload(weights, 10**9, BOB))
    assert alices in catalog.names(ALICE)  # the oldest of all, but in use
    assert [n in catalog.names(BOB) for n in bobs] == [False, False, True, True]  # Bob's own share: two
    assert catalog.uploads.evicted_since(BOB) == bobs[:2] and catalog.uploads.evicted_since(BOB) == []  # told once
    with pytest.raises(PlaygroundError, match="removed to make room"):
        catalog.resolve(bobs[0], BOB)
    catalog.uploads.in_use = lambda: [catalog.stored_path(n, o) for o, n in ((ALICE, alices), (BOB, bobs[2]), (BOB, bobs[3]))]
    with pytest.raises(PlaygroundError, match="other visitors are using"):
        catalog.save_upload(weights, 10**9, CAROL)  # only folders in use would make room: refused
    assert alices in catalog.names(ALICE) and bobs[3] in catalog.names(BOB)
    with pytest.raises(PlaygroundError, match="per tab"):
        catalog.uploads.make_room(3 * size, CAROL)


def test_a_session_end_forgets_everything_its_owner_made(catalog, tiny):
    name = catalog.save_upload([tiny / "config.json", tiny / "model.safetensors"], 10**8, ALICE)
    hub = catalog.uploads.hub_dir_for(ALICE) / "org" / "repo"
    shutil.copytree(tiny, hub)  # what download_hub leaves, last used now
    os.utime(hub, (catalog.uploads.clock(), catalog.uploads.clock()))
    assert HUB_PREFIX + "org/repo" in catalog.names(ALICE) and HUB_PREFIX + "org/repo" not in catalog.names(BOB)
    with pytest.raises(PlaygroundError) as caught:
        catalog.resolve(HUB_PREFIX + "org/repo", BOB)
    assert str(caught.value) == PRIVATE_HUB
    bobs = catalog.save_upload([tiny / "config.json", tiny / "model.safetensors"], 10**8, BOB)
    registry = ModelRegistry()
    registry.get(catalog.resolve(name, ALICE))
    registry.get(catalog.resolve(HUB_PREFIX + "org/repo", ALICE))
    registry.get(catalog.resolve(bobs, BOB))
    removed = catalog.uploads.forget(ALICE)
    assert registry.drop_under(removed) == 2 and len(registry.loaded_keys()) == 1
    assert name not in catalog.names(ALICE) and bobs in catalog.names(BOB)


def test_owner_ids_never_become_paths(catalog, tiny):
    for owner in ("../../etc", "/", "a" * 10_000, "\ud800", "@x", "hub/x"):
        name = catalog.save_upload([tiny / "model.safetensors"], 10**8, owner)
        path = catalog.resolve(name, owner)
        assert path.parent.parent == catalog.uploads.upload_dir and path.parent.name.startswith("@")
    with pytest.raises(ValueError, match="private"):
        catalog.entries(None)  # the public app must say whose listing it wants


def test_the_hub_download_goes_to_the_owners_folder_and_fails_offline_in_one_line(catalog, monkeypatch):
    from playground.checkpoints.hub import NoNetworkError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert catalog.uploads.hub_dir_for(ALICE) != catalog.uploads.hub_dir_for(BOB)
    with pytest.raises(NoNetworkError, match="^no network: "):
        catalog.download_hub("HuggingFaceTB/SmolLM2-135M-Instruct", ALICE, max_bytes=10**9)


def _fake_hf_cache(cache: Path, repo_id: str, source: Path, files: tuple[str, ...]) -> Path:
    """The layout huggingface_hub (and a Space's preload_from_hub) writes: blobs, refs/main, snapshot links."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    revision = "0123456789abcdef0123456789abcdef01234567"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for i, name in enumerate(files):
        shutil.copy(source / name, repo / "blobs" / f"blob{i}")
        (snapshot / name).symlink_to(Path("../..") / "blobs" / f"blob{i}")
    return snapshot


def test_a_preloaded_smollm2_is_offered_from_the_hugging_face_cache_offline(tiny, tmp_path, monkeypatch):
    from tests.ui_fixtures import save_char_tokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing answers there
    source = tmp_path / "src"
    shutil.copytree(tiny, source)
    save_char_tokenizer(source)
    files = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
    empty = tmp_path / "empty-weights"
    empty.mkdir()
    catalog = Catalog(empty, tmp_path / "uploads", private=True, hf_cache_dir=tmp_path / "hf")
    assert "SmolLM2-135M-Instruct" not in catalog.names(ALICE)  # nothing cached: not offered
    snapshot = _fake_hf_cache(tmp_path / "hf", "HuggingFaceTB/SmolLM2-135M-Instruct", source, files)
    entries = {e.name: e.label for e in catalog.entries(ALICE)}
    assert entries["SmolLM2-135M-Instruct"].startswith("SmolLM2-135M-Instruct (preloaded from the Hub)")
    assert catalog.names(ALICE) == catalog.names(BOB)  # offered to everyone
    path = catalog.resolve("SmolLM2-135M-Instruct", BOB)
    assert path == snapshot and catalog.is_shared(path)
    lm = playground.load_model(path)  # through the snapshot's links into blobs/
    assert lm.tokenizer is not None and lm.config.n_layers == 1
    # An imported copy in the weights folder wins over the cache.
    shutil.copytree(source, empty / "SmolLM2-135M-Instruct")
    assert catalog.resolve("SmolLM2-135M-Instruct", ALICE) == (empty / "SmolLM2-135M-Instruct").resolve()


def test_the_operator_s_default_model_opens_pages_when_it_is_offered(weights, tmp_path):
    """`app.py --default-model NAME`: pages open on NAME, listed first; a name not offered keeps the usual default
    (and says so, `default_offered`); the operator's choice wins over a Space's preloaded model."""
    save_tiny_decoder(tmp_path / "more" / "other-lm", seed=3)
    chosen = Catalog(weights, tmp_path / "uploads", extra_weights_dirs=[tmp_path / "more"], default_model="other-lm")
    assert chosen.default_name() == "other-lm" and chosen.names()[0] == "other-lm" and chosen.default_offered()
    missing = Catalog(weights, tmp_path / "uploads", default_model="no-such-model")
    assert missing.default_name() == "tiny-lm" and not missing.default_offered()
    for hostile in ("../tiny-lm", "/etc/passwd", UPLOAD_PREFIX + "0" * 32):  # only a catalog name is ever taken
        assert Catalog(weights, tmp_path / "uploads", default_model=hostile).default_name() == "tiny-lm"
    assert Catalog(weights, tmp_path / "uploads").default_offered()  # none asked: nothing to say


def test_the_model_list_names_each_model_s_family_not_its_class(tmp_path):
    """Issue 36 point 5: the dropdown showed "SmolLM2-135M-Instruct · LlamaF…", the class name cut off."""
    weights = tmp_path / "weights"
    save_decoder(weights / "SmolLM2-135M-Instruct", "llama", llama_like())  # a LlamaForCausalLM
    save_decoder(weights / "gemma-3-270m", "gemma3_text", gemma3_like())  # a Gemma3ForCausalLM
    save_decoder(weights / "gpt2", "gpt2", gpt2_like())  # a GPT2LMHeadModel
    save_seq2seq(weights / "t5-small", "t5", t5_like())  # a T5ForConditionalGeneration
    labels = {e.name: e.label for e in Catalog(weights, tmp_path / "uploads").entries(None)}
    assert labels["SmolLM2-135M-Instruct"] == "SmolLM2-135M-Instruct · Llama"
    assert labels["gemma-3-270m"] == "gemma-3-270m · Gemma3"
    assert (labels["t5-small"], labels["gpt2"]) == ("t5-small · T5", "gpt2 · GPT2")
    family = catalog_module.family
    assert family("Transformer") == "Transformer" and family("Model") == "Model"  # nothing before the suffix: kept

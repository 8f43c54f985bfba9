"""A tokenizer whose Rust code panics raises one TokenizerError line (issue 42, row 8).

A tokenizer.json split pattern that backtracks exponentially makes `tokenizers` panic (Oniguruma's retry limit);
pyo3's PanicException is a BaseException, so before it went past every `except Exception` of the library and the app.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import playground
from playground.checkpoints.tokenizer import guarded
from playground.errors import PlaygroundError, TokenizerError
from playground.rust_stderr import without_panic_reports
from tests.tokenizer_surgery import PANIC_PROMPT, backtracking_decoder, backtracking_split
from tests.ui_fixtures import save_tiny_decoder

ROOT = Path(__file__).resolve().parents[2]
READ = "this tokenizer could not read the prompt: change or shorten it, or pick another model"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return backtracking_decoder(backtracking_split(save_tiny_decoder(tmp_path_factory.mktemp("lm") / "lm")))


def test_a_panicking_encode_or_decode_is_one_line_and_the_tokenizer_reads_on(folder):
    lm = playground.load_model(folder)
    with pytest.raises(TokenizerError) as caught:
        lm.tokenize(PANIC_PROMPT)
    assert str(caught.value) == READ and caught.value.args[0].key == "tokenizer_panic_encode"
    a = lm.tokenize("a")[0]
    with pytest.raises(TokenizerError, match="could not turn the tokens into text") as caught:
        lm.detokenize([a] * 60)
    assert caught.value.args[0].key == "tokenizer_panic_decode"
    ids = lm.tokenize("Hello there")  # the same tokenizer, the next text
    assert lm.detokenize(ids) == "Hello there"
    with pytest.raises(TokenizerError, match="could not read the prompt"):
        playground.generate_all(lm, PANIC_PROMPT, playground.GenerationConfig(max_new_tokens=2))


@pytest.mark.parametrize("backtrace", ["0", "1"])
def test_the_cli_says_one_line_and_exits_2(folder, backtrace):
    done = subprocess.run([sys.executable, "-m", "playground", "generate", "--model", str(folder), "--prompt",
                           PANIC_PROMPT, "--max-new-tokens", "2", "--json"], capture_output=True, text=True,
                          cwd=ROOT, env={"RUST_BACKTRACE": backtrace, "PATH": "/usr/bin:/bin"}, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"error: {READ}\n"  # one line: Rust's own report of the panic is not printed as well


def test_rusts_panic_reports_are_dropped_and_every_other_line_kept():
    """Rust's report as `tokenizers` 0.22 prints it (with and without a backtrace, before Rust 1.88 without the
    thread id); what else a command wrote stays, in order."""
    text = ("loading\n\n"
            "thread '<unnamed>' (26123) panicked at /root/.cargo/onig-6.5.3/src/lib.rs:647:23:\n"
            "Onig: Regex search error: retry-limit-in-match over\n"
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
            "a warning\n\n"
            "thread 'main' panicked at src/lib.rs:1:1:\nboom\nstack backtrace:\n   0: rust_begin_unwind\n"
            "note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.\n"
            "\nthe end\n")
    assert without_panic_reports(text) == "loading\na warning\n\nthe end\n"
    assert without_panic_reports("thread safety note: fine\n") == "thread safety note: fine\n"


def test_only_the_tokenizers_panic_is_turned_into_a_line():
    class PanicException(BaseException):  # what pyo3 raises: a BaseException named so, not an Exception
        pass

    def raising(error: BaseException):
        raise error

    with pytest.raises(TokenizerError):
        guarded(raising, PanicException("Onig: Regex search error"))
    for error in (KeyboardInterrupt(), SystemExit(3), GeneratorExit(), ValueError("x")):
        with pytest.raises(type(error)):  # an interrupt, an exit, a closed generator, an ordinary error: as raised
            guarded(raising, error)
    assert issubclass(TokenizerError, PlaygroundError)

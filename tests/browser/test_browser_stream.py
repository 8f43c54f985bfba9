"""A long run in real Chromium: the page is sent each token once and holds only the newest frame, never the run
again, and Stop ends the run at the tokens on screen, in every tab.

The page's main-thread lateness and its rates are measured by `python -m playground.tools.bench --browser
--stream` (a benchmark, not a timed test); here, what those numbers rest on.
"""

from __future__ import annotations

import json

import pytest
from gradio_client.utils import apply_diff

from playground.app.frames import entries
from tests.browser import test_browser as base
from tests.browser.test_browser import DESKTOP, generate_and_wait, new_page, open_app, tokens, wait_state

pytestmark = pytest.mark.browser
server, browser = base.server, base.browser  # the shipped, tiny random and chat models; Chromium

# The session's event stream as the page reads it (Gradio's client streams it with fetch): each message kept.
TEE_STREAM = """(() => {
  window.__sse = [];
  const fetch0 = window.fetch;
  window.fetch = async (...args) => {
    const response = await fetch0(...args);
    const url = String(args[0] && args[0].url || args[0]);
    if (!url.includes('queue/data') || !response.body) return response;
    const [mine, theirs] = response.body.tee();
    (async () => {
      const reader = mine.getReader(), decoder = new TextDecoder();
      let text = '';
      for (;;) {
        const {done, value} = await reader.read();
        if (done) return;
        text += decoder.decode(value, {stream: true});
        const parts = text.split('\\n\\n');
        text = parts.pop();
        for (const part of parts) for (const line of part.split('\\n'))
          if (line.startsWith('data:')) window.__sse.push(line.slice(5));
      }
    })().catch(() => {});  // Gradio aborts the stream when the page no longer needs it
    return new Response(theirs, {status: response.status, statusText: response.statusText, headers: response.headers});
  };
})();"""

# The session's event stream with its sixth frame of the live screen taken out: a frame lost on the way.
DROP_ONE_FRAME = """(() => {
  window.__dropped = 0;
  const fetch0 = window.fetch;
  window.fetch = async (...args) => {
    const response = await fetch0(...args);
    const url = String(args[0] && args[0].url || args[0]);
    if (!url.includes('queue/data') || !response.body) return response;
    let frames = 0, text = '';
    const encoder = new TextEncoder(), decoder = new TextDecoder();
    const body = response.body.pipeThrough(new TransformStream({
      transform(chunk, out) {
        text += decoder.decode(chunk, {stream: true});
        const parts = text.split('\\n\\n');
        text = parts.pop();
        for (const part of parts) {
          if (part.includes('process_generating') && part.includes('from') && ++frames === 6) { window.__dropped++; continue; }
          out.enqueue(encoder.encode(part + '\\n\\n'));
        }
      },
      flush(out) { if (text) out.enqueue(encoder.encode(text)); },
    }));
    return new Response(body, {status: response.status, statusText: response.statusText, headers: response.headers});
  };
})();"""

# Every generated token element added to or removed from the stream while it runs.
COUNT_ELEMENTS = """() => { window.__dom = {added: 0, removed: 0};
  new MutationObserver((records) => { for (const r of records) {
    r.addedNodes.forEach((n) => { if (n.classList && n.classList.contains('gen')) window.__dom.added++; });
    r.removedNodes.forEach((n) => { if (n.classList && n.classList.contains('gen')) window.__dom.removed++; });
  } }).observe(document.querySelector('#token-stream'), {childList: true}); }"""

# A click on Stop records what the page showed when its handler ran (before Gradio's own handler).
WATCH_STOP = """() => { window.__seen = null; document.querySelector('#stop-btn').addEventListener('click', () => {
  if (window.__seen === null) window.__seen = document.querySelectorAll('#token-stream .tok.gen').length; }, true); }"""


def live_values(messages: list[str]) -> list[dict]:
    """The live screen's value after each message of the run that streamed into it: Gradio sends an event's first
    value whole and then its changes (applied here as its client applies them)."""
    values, event, current = [], None, None
    for raw in messages:
        msg = json.loads(raw)
        data = (msg.get("output") or {}).get("data")
        if msg.get("msg") != "process_generating" or not data:
            continue
        if event is None and isinstance(data[0], dict) and "head" in data[0]:
            event, current = msg["event_id"], data
        elif msg["event_id"] == event:
            current = [apply_diff(v, d) for v, d in zip(current, data)]
        else:
            continue
        values.append(current[0])
    return values


def _slow_run(browser, server, script: str):
    """A page with `script` installed before its own, after a 200-token tiny-random run in slow motion (20 ms a
    token), its stream's elements counted (`COUNT_ELEMENTS`) from before Generate."""
    page = new_page(browser, DESKTOP)
    page.add_init_script(script)
    open_app(page, server, model="tiny-random", max_new_tokens=200, pace_ms=20)
    page.fill("#prompt textarea", "Hello")
    page.evaluate(COUNT_ELEMENTS)
    assert "Done: 200 tokens" in generate_and_wait(page)
    return page


def test_a_long_run_sends_each_token_once_and_the_page_never_holds_the_run(browser, server):
    """200 tokens in slow motion (a few a frame): the first value holds the run's head (its prompt), every later
    one only the tokens since the frame before, starting where the page's copy ends, so the component's value
    stays one frame, however long the run; the stream's elements are each added once and never rebuilt."""
    page = _slow_run(browser, server, TEE_STREAM)
    values = live_values(page.evaluate("window.__sse"))
    assert len(values) > 20 and "head" in values[0] and values[0]["from"] == 0
    held = 0
    for value in values[1:]:
        assert "head" not in value and value["from"] == held  # only what the page lacks
        new = entries(value)
        assert len(new) <= 40  # this frame's tokens (20 ms each, a frame every 80 ms or more), never the run
        held += len(new)
    assert held == 200 and values[-1]["status"]["state"] == "done"
    assert page.evaluate("window.__dom") == {"added": 200, "removed": 0}
    assert len(tokens(page)) == 200
    assert not page.js_errors, page.js_errors
    page.context.close()


def test_a_lost_frame_is_repaired_without_drawing_the_run_again(browser, server):
    """A frame that never arrives (taken out of the event stream here) leaves a gap: the page asks for the run
    whole and adds only the tokens it lacks; the ones on screen stay (before: the stream was built again)."""
    page = _slow_run(browser, server, DROP_ONE_FRAME)
    assert page.evaluate("window.__dropped") == 1
    assert page.evaluate("window.__dom") == {"added": 200, "removed": 0}  # before: 274 added, 74 removed
    assert len(tokens(page)) == 200
    assert not page.js_errors, page.js_errors
    page.context.close()


def _stop_at(page, at: int) -> int:
    """A real mouse click on Stop once the page shows `at` tokens: the tokens on screen when it was handled."""
    box = page.locator("#stop-btn").bounding_box()
    page.wait_for_function("(n) => document.querySelectorAll('#token-stream .tok.gen').length >= n", arg=at,
                           polling=20)
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function("() => window.__seen !== null")
    return page.evaluate("window.__seen")


def test_stop_ends_a_long_run_at_the_tokens_on_screen_in_every_tab(browser, server):
    """Two tabs stream 240 tokens at once, one of them after earlier runs; Stop, clicked in each at 100 and 140
    tokens, ends each run at the tokens its page showed (the engine and the frames on their way were ahead):
    the stream, the status and the run agree, and the tab runs again afterwards."""
    pages = [new_page(browser, DESKTOP) for _ in range(2)]
    for page in pages:
        # 50 ms a token: 12 s a run, so each Stop (at 100 and 140 tokens) lands before the run's end on a loaded
        # machine too (at 20 ms, two workers on 2 cores once saw both runs reach 240 first)
        open_app(page, server, model="tiny-random", max_new_tokens=240, pace_ms=50)
        page.fill("#prompt textarea", "Hello")
    for _ in range(2):  # a tab with a history: earlier runs stay in its page and its session
        generate_and_wait(pages[1])
    for page in pages:
        page.evaluate(WATCH_STOP)
        page.evaluate("() => { window.__before = document.querySelector('#token-stream').firstChild; }")
        page.click("#generate-btn")
        page.wait_for_function("() => document.querySelector('#token-stream').firstChild !== window.__before")
    seen = [_stop_at(page, at) for page, at in zip(pages, (100, 140))]
    for page, shown in zip(pages, seen):
        status = wait_state(page, "stopped", "done", "error")
        n = len(tokens(page))
        assert 100 <= shown < 240 and shown <= n <= shown + 2, (shown, n, status)  # within a token or two
        assert f"Stopped after {n} tokens" in status
    assert "Done" in generate_and_wait(pages[0])  # the tab runs again
    for page in pages:
        assert not page.js_errors, page.js_errors
        page.context.close()

// js_on_load of the guided path (#start-here), after sections.js: `element` comes from Gradio. The HTML (guide.py)
// carries the steps in the page's language; a step opens its section and tab, brings its control and what the step
// is about (its `keep`) into the window above the card, and highlights the control (inside its own box, so a scroll
// box around it never clips the highlight). element.dataset.step is the step on screen (1-based; '' when closed).
(() => {
  const st = { step: -1, watch: null, live: null, set: '' };
  const MARGIN = 8;
  const host = element.closest('#start-here') || element;  // tests read host.dataset.step
  const card = () => element.querySelector('.pg-guide');
  const steps = () => { try { return JSON.parse(card().dataset.steps); } catch (e) { return []; } };
  const shown = (el) => !!el && el.getClientRects().length > 0;

  // The window's part the step may use: below the top, above the card where the card spans the same columns.
  function room(left, right) {
    const c = card().getBoundingClientRect();
    const under = c.left < right && c.right > left;
    return { top: MARGIN, bottom: (under ? c.top : window.innerHeight) - MARGIN };
  }

  // Scroll each scroll box around `el` (the settings' column) so that `el` is inside it; the window comes after.
  function revealInside(el) {
    for (let box = el.parentElement; box && box !== document.body; box = box.parentElement) {
      const s = getComputedStyle(box);
      if (!/(auto|scroll)/.test(s.overflowY) || box.scrollHeight <= box.clientHeight) continue;
      const r = el.getBoundingClientRect(), b = box.getBoundingClientRect();
      if (r.top < b.top) box.scrollTop -= b.top - r.top + MARGIN;
      else if (r.bottom > b.bottom) box.scrollTop += Math.min(r.bottom - b.bottom + MARGIN, r.top - b.top - MARGIN);
    }
  }

  // Bring the target and what it keeps into the room above the card, moving the window as little as possible;
  // when they do not fit together the target wins, placed on the side of what it keeps.
  function place(s, target) {
    revealInside(target);
    const t = target.getBoundingClientRect();
    const behavior = 'instant';  // at once: a resize re-places it, and a smooth scroll would race that
    if (t.height > window.innerHeight * 0.5) {  // a tall panel (a tab) from its top, its section's tabs above it
      const top = (document.getElementById('deep-views') || target).getBoundingClientRect().top;
      window.scrollBy({ top: top - MARGIN, behavior });
      return;
    }
    const kept = s.keep.map((sel) => document.querySelector(sel)).filter(shown).map((e) => e.getBoundingClientRect());
    const all = [t, ...kept];
    const u = { top: Math.min(...all.map((r) => r.top)), bottom: Math.max(...all.map((r) => r.bottom)),
                left: Math.min(...all.map((r) => r.left)), right: Math.max(...all.map((r) => r.right)) };
    const r = room(u.left, u.right);
    let by = 0;
    if (u.bottom - u.top <= r.bottom - r.top) by = u.top < r.top ? u.top - r.top : Math.max(0, u.bottom - r.bottom);
    else if (u.top < t.top) by = t.bottom - r.bottom;  // what it keeps is above: the target at the room's bottom
    else by = t.top - r.top;
    if (Math.abs(by) > 1) window.scrollBy({ top: by, behavior });
  }

  // A live step: the mark its view wrote for the run on screen (never the previous run's) under the step's words,
  // and the sliders set to it once per mark.
  function follow(s) {
    const g = card(), line = g.querySelector('.pg-guide-live');
    const mark = s.live && document.querySelector(s.live);
    const current = document.querySelector('#run-history [data-run].current');
    const fresh = mark && current && mark.dataset.run === current.dataset.run;
    line.hidden = !fresh;
    if (!fresh) return;
    line.textContent = (mark.innerText || '').trim();
    const key = [mark.dataset.run, ...s.sets.map(([, k]) => mark.dataset[k])].join(':');
    if (key === st.set) return;
    st.set = key;
    for (const [sel, k] of s.sets) {
      const input = document.querySelector(`${sel} input[type=range]`);
      if (!input) continue;
      input.value = mark.dataset[k];
      input.dispatchEvent(new Event('input', { bubbles: true }));
      input.dispatchEvent(new Event('change', { bubbles: true }));
    }
  }

  function stopWatching() {
    if (st.watch) st.watch.disconnect();
    if (st.live) st.live.disconnect();
    st.watch = st.live = null;
    document.documentElement.classList.remove('pg-guiding');
  }

  function open(s) {
    if (s.tab && window.pgOpenTab) return window.pgOpenTab(s.section, s.tab);
    if (!s.section) return Promise.resolve();
    const b = document.querySelector(`#deep-views > .tab-wrapper [role=tab][data-tab-id="${s.section}"]`);
    if (b && b.getAttribute('aria-selected') !== 'true') b.click();
    return new Promise((resolve) => {
      const start = performance.now();
      (function poll() {
        if (shown(document.querySelector(s.target)) || performance.now() - start > 5000) resolve();
        else requestAnimationFrame(poll);
      })();
    });
  }

  function show() {
    const g = card();
    if (!g) return;
    const all = steps();
    stopWatching();
    document.querySelectorAll('.pg-guide-target').forEach((e) => e.classList.remove('pg-guide-target'));
    const isOpen = st.step >= 0 && st.step < all.length;
    if (!isOpen) st.step = -1;
    g.hidden = !isOpen;
    g.dataset.shown = String(st.step);
    host.dataset.step = isOpen ? String(st.step + 1) : '';
    const start = element.querySelector('.pg-start-btn');
    if (start) start.setAttribute('aria-expanded', String(isOpen));
    if (!isOpen) return;
    const s = all[st.step];
    g.querySelector('.pg-guide-count').textContent =
      g.dataset.count.replace('{n}', st.step + 1).replace('{total}', all.length);
    g.querySelector('.pg-guide-text').textContent = s.text;
    g.querySelector('.pg-guide-live').hidden = true;
    g.querySelector('[data-act=back]').disabled = st.step === 0;
    g.querySelector('[data-act=next]').textContent = st.step === all.length - 1 ? g.dataset.done : g.dataset.next;
    // room under the page's end, so that a control near it can still come above the card
    document.documentElement.style.setProperty('--pg-guide-room', `${g.offsetHeight + 2 * MARGIN}px`);
    document.documentElement.classList.add('pg-guiding');
    const step = st.step;
    open(s).then(() => {
      const target = document.querySelector(s.target);
      if (!target || step !== st.step) return;
      target.classList.add('pg-guide-target');
      place(s, target);
      // the stream grows, a result appears under its button: what the step keeps stays in the room
      st.watch = new ResizeObserver(() => { if (step === st.step) place(s, target); });
      st.watch.observe(document.body);  // a kept part shown later (a result's plot) resizes the page too
      for (const sel of s.keep) { const e = document.querySelector(sel); if (e) st.watch.observe(e); }
      if (s.live) {
        st.live = new MutationObserver(() => follow(s));
        st.live.observe(document.getElementById('deep-views') || document.body, { childList: true, subtree: true });
        const runs = document.getElementById('run-history');
        if (runs) st.live.observe(runs, { childList: true, subtree: true, attributes: true });
        follow(s);
      }
    });
  }

  element.addEventListener('click', (event) => {
    const b = event.target.closest('button');
    if (!b) return;
    if (b.classList.contains('pg-start-btn')) st.step = 0;
    else if (b.dataset.act === 'next') st.step += 1;  // past the last step: the path ends
    else if (b.dataset.act === 'back') st.step = Math.max(0, st.step - 1);
    else if (b.dataset.act === 'close') st.step = -1;
    else return;
    show();
  });
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && st.step >= 0) { st.step = -1; show(); }
  });
  // The language switch writes the HTML again: the step on screen stays, in the new words.
  new MutationObserver(() => {
    const g = card();
    if (g && st.step >= 0 && g.dataset.shown !== String(st.step)) show();
  }).observe(element, { childList: true, subtree: true });
})();

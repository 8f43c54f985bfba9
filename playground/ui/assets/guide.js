// js_on_load of the guided path (#start-here), after sections.js: `element` comes from Gradio. The HTML (guide.py)
// carries the steps in the page's language; a step opens its section and tab, scrolls to its control and
// highlights it. element.dataset.step is the step on screen (1-based; empty when the guide is closed).
(() => {
  const st = { step: -1 };
  const host = element.closest('#start-here') || element;  // tests read host.dataset.step
  const card = () => element.querySelector('.pg-guide');
  const steps = () => { try { return JSON.parse(card().dataset.steps); } catch (e) { return []; } };

  function show() {
    const g = card();
    if (!g) return;
    const all = steps();
    document.querySelectorAll('.pg-guide-target').forEach((e) => e.classList.remove('pg-guide-target'));
    const open = st.step >= 0 && st.step < all.length;
    if (!open) st.step = -1;
    g.hidden = !open;
    g.dataset.shown = String(st.step);
    host.dataset.step = open ? String(st.step + 1) : '';
    const start = element.querySelector('.pg-start-btn');
    if (start) start.setAttribute('aria-expanded', String(open));
    if (!open) return;
    const s = all[st.step];
    g.querySelector('.pg-guide-count').textContent =
      g.dataset.count.replace('{n}', st.step + 1).replace('{total}', all.length);
    g.querySelector('.pg-guide-text').textContent = s.text;
    g.querySelector('[data-act=back]').disabled = st.step === 0;
    g.querySelector('[data-act=next]').textContent = st.step === all.length - 1 ? g.dataset.done : g.dataset.next;
    const step = st.step;
    const opened = s.tab && window.pgOpenTab ? window.pgOpenTab(s.section, s.tab) : Promise.resolve();
    opened.then(() => {
      const target = document.querySelector(s.target);
      if (!target || step !== st.step) return;
      target.classList.add('pg-guide-target');
      // a tall panel (a tab) from its top, with its section's tabs above it; a control in the middle
      const tall = target.getBoundingClientRect().height > window.innerHeight * 0.5;
      (tall ? (document.getElementById('deep-views') || target) : target)
        .scrollIntoView({ block: tall ? 'start' : 'center', behavior: 'smooth' });
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

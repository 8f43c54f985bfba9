// js_on_load of the hidden #open-view (see playground/ui/sections.py): `props` and `trigger` come from Gradio.
// The server draws only the open view, so whenever the view on screen changes — a section opened (Gradio mounts
// its tabs then, and a section opens on the tab it showed last), a tab picked, the guided path — its tab id
// becomes the component's value and a select event is sent. The id travels as the value, not as the event's
// data: a redraw still running holds the next one back (Gradio's "always last"), which then reads the newest
// value. Also window.pgOpenTab(section, tab) for the guided path.
(() => {
  const root = () => document.getElementById('deep-views');
  const openSection = () => root() && root().querySelector(':scope > .tab-wrapper [role=tab][aria-selected=true]');
  const sectionButton = (name) => root() && root().querySelector(`:scope > .tab-wrapper [role=tab][data-tab-id="${name}"]`);
  const tabButton = (panel, tab) => panel && panel.querySelector(
    tab ? `.pg-section-tabs [role=tab][data-tab-id="${tab}"]` : '.pg-section-tabs [role=tab][aria-selected=true]');
  const shown = (el) => !!el && el.getClientRects().length > 0;
  let sent = null;
  let queued = false;

  function waitFor(find, ms) {
    return new Promise((resolve) => {
      const start = performance.now();
      (function poll() {
        const found = find();
        if (found || performance.now() - start > ms) resolve(found || null);
        else requestAnimationFrame(poll);
      })();
    });
  }

  // The views' tab on screen: the selected tab of the open section (null: a section of no views, or not mounted).
  function onScreen() {
    const section = openSection();
    const panel = section && document.getElementById(section.getAttribute('aria-controls'));
    const tab = shown(panel) ? tabButton(panel) : null;
    return tab ? tab.dataset.tabId : null;
  }

  function send(tab) {
    if (tab && tab !== sent) { sent = tab; props.value = tab; trigger('select', { tab }); }
  }

  function check() {
    queued = false;
    const section = openSection();
    if (!section) return;
    // a section of no views (Class tools): no view is on screen, so none is drawn after each run
    if (VIEWLESS.includes(section.dataset.tabId)) { send(NO_VIEW); return; }
    if (!(section.getAttribute('aria-controls') || '').startsWith('section-')) return;
    waitFor(onScreen, 5000).then(send);
  }

  // the first view on screen is the server's default (the first tab of the first section): nothing to send
  waitFor(onScreen, 10000).then((tab) => { if (sent === null) sent = tab; });
  new MutationObserver(() => { if (!queued) { queued = true; requestAnimationFrame(check); } })
    .observe(document.body, { subtree: true, attributes: true, attributeFilter: ['aria-selected'] });

  // Open `tab` of `section` (ids of sections.py); resolves with its panel once it is on screen (or null after 5 s).
  window.pgOpenTab = (section, tab) => {
    const sb = sectionButton(section);
    if (!sb) return Promise.resolve(null);
    const panelId = sb.getAttribute('aria-controls');
    if (sb.getAttribute('aria-selected') !== 'true') sb.click();
    return waitFor(() => {
      const b = tabButton(document.getElementById(panelId), tab);
      if (b && b.getAttribute('aria-selected') !== 'true') b.click();
      const panel = b && document.getElementById(b.getAttribute('aria-controls'));
      return b && b.getAttribute('aria-selected') === 'true' && shown(panel) ? panel : null;
    }, 5000);
  };
})();

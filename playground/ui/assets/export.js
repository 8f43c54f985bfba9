// Every plotly figure on the page gets an SVG download beside plotly's own PNG camera: the button is
// added to each toolbar as it appears (plotly rebuilds toolbars on redraws, so it watches the page).
(() => {
  if (window.__pgSvgExport) return;
  window.__pgSvgExport = true;
  const icon = '<svg viewBox="0 0 1000 1000" class="icon" height="1em" width="1em"><path d="M500 80v560m0 0l-200-200m200 200l200-200M140 720v180h720V720" stroke="currentColor" stroke-width="90" fill="none"/></svg>';
  const add = (gd) => {
    const bar = gd.querySelector('.modebar');
    if (!bar || bar.querySelector('.pg-svg-btn') || !window.Plotly) return;
    const group = document.createElement('div');
    group.className = 'modebar-group';
    const a = document.createElement('a');
    a.className = 'modebar-btn pg-svg-btn';
    a.setAttribute('rel', 'tooltip');
    a.setAttribute('data-title', document.documentElement.lang === 'zh-CN' ? '下载为 SVG' : 'Download as SVG');
    a.innerHTML = icon;
    a.addEventListener('click', () => {
      const holder = gd.closest('[id]');
      window.Plotly.downloadImage(gd, { format: 'svg', filename: holder && holder.id ? holder.id : 'figure' });
    });
    group.appendChild(a);
    bar.prepend(group);
  };
  let queued = false;
  const scan = () => { queued = false; document.querySelectorAll('.js-plotly-plot').forEach(add); };
  new MutationObserver(() => { if (!queued) { queued = true; requestAnimationFrame(scan); } })
    .observe(document.body, { childList: true, subtree: true });
  scan();
})();

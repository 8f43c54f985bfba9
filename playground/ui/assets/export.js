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
      // the name the figure's own PNG download has (made from its title: "transformer-playground-step-4-…"),
      // else the element's id
      const own = gd._context && gd._context.toImageButtonOptions && gd._context.toImageButtonOptions.filename;
      const holder = gd.closest('[id]');
      window.Plotly.downloadImage(gd, { format: 'svg', filename: own || (holder && holder.id ? holder.id : 'figure') });
    });
    group.appendChild(a);
    bar.prepend(group);
  };
  // Plotly's own toolbar tooltips in the page's language (plotly.js ships English only): the English title is
  // kept on the button, so a switch back to English restores it.
  const ZH = {
    'Download plot as a png': '下载为 PNG 图片', 'Download plot as a PNG': '下载为 PNG 图片', 'Zoom': '缩放', 'Pan': '平移', 'Reset axes': '重置坐标轴',
    'Autoscale': '自动缩放', 'Zoom in': '放大', 'Zoom out': '缩小', 'Box Select': '框选', 'Lasso Select': '套索选择',
    'Reset view': '重置视图', 'Produced with Plotly.js': '由 Plotly.js 生成',
  };
  const translate = (gd) => {
    const zh = document.documentElement.lang === 'zh-CN';
    gd.querySelectorAll('.modebar-btn[data-title]').forEach((b) => {
      if (b.classList.contains('pg-svg-btn')) { b.setAttribute('data-title', zh ? '下载为 SVG' : 'Download as SVG'); return; }
      const en = b.getAttribute('data-en-title') || b.getAttribute('data-title');
      if (!b.hasAttribute('data-en-title')) b.setAttribute('data-en-title', en);
      const want = zh && ZH[en] ? ZH[en] : en;
      if (b.getAttribute('data-title') !== want) b.setAttribute('data-title', want);
    });
  };
  let queued = false;
  const scan = () => {
    queued = false;
    document.querySelectorAll('.js-plotly-plot').forEach((gd) => { add(gd); translate(gd); });
  };
  new MutationObserver(() => { if (!queued) { queued = true; requestAnimationFrame(scan); } })
    .observe(document.body, { childList: true, subtree: true });
  new MutationObserver(() => { if (!queued) { queued = true; requestAnimationFrame(scan); } })
    .observe(document.documentElement, { attributes: true, attributeFilter: ['lang'] });
  scan();
})();

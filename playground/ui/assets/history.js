// js_on_load of the run history (#run-history): `element` and `trigger` come from Gradio. Each entry is a button
// carrying its run's number in data-run; a click on one that is not on screen asks the server for that run.
element.addEventListener('click', (event) => {
  const entry = event.target.closest('[data-run]');
  if (entry && !entry.classList.contains('current')) trigger('click', { run: Number(entry.dataset.run) });
});

"""The app's core, without Gradio: what a visitor's tab holds and what a run is, unit-tested without a server.

Runs and settings: fields (one row per run setting and per view control), settings (UISettings made from the rows,
and links), limits (the app's caps and its one lenient pass), play (one press, from settings to frames, for the
page, links, branches, forks and /generate_text), run (one generation, where it came from, and its queries),
session (one tab: the run history, the run on screen, the selected step, the view, the language, the notes box;
all tabs), history (the history and the badge in words), frames (what the live screen receives).

Experiments and views: experiments/ (causal, kv, precision, speculative: one module each, found by the package),
lab (the causal lab's numbers), view (what a view is) and views/ (every panel and lesson as a view), lessons and
batch_lesson (the seeds' lessons), cache_rerun and measurements (timed on request).

Words: words (every word the page shows, from the locale files), notes (keyed notes, put into words at the edge),
describe (labels and formatting: model card, captions, notes), numbers (a step's numbers that cannot be right).

Models and serving: catalog (the checkpoints offered), names (a name -> its file: the security boundary), uploads
(visitors' files: quota, time to live), registry (one shared copy of each loaded model), serving (every visitor's
run decoded in one shared batch per model), jobs (model work in bounded slices between the batch's steps),
engine_stream (the one place a run's events come from), zerogpu (on a ZeroGPU Space: each run one GPU call in a
forked worker, the CPU batch when refused), torch_thread (the one thread every forward pass runs on), heap (freed
memory back to the OS).
"""

"""The app's core, without Gradio: what a visitor's tab holds and what a run is, unit-tested without a server.

Modules: play (one press, from settings to frames, for the page, links, branches and /generate_text),
run (one generation and its queries), session (one tab: current run, selected step, view,
language, the notes box; all tabs), notes and note_words (keyed notes, put into words at the edge), catalog (the
checkpoints offered), names (a name -> its file: the security boundary), uploads (visitors' files: quota, time to
live), registry (one shared copy of each loaded model), engine_stream (the one place a run's events come from), settings (the settings
and their link round trip), limits (the app's caps and clamps), frames (what the live screen
receives), serving (every visitor's run decoded in one shared batch per model), zerogpu (on a ZeroGPU
Space: each run one GPU call in a forked worker, the CPU batch when refused), words (every word the page shows, English and 中文), describe (labels and formatting: model
card, captions, notes), torch_thread (the one thread every forward pass runs on), heap (freed memory
back to the OS).
"""

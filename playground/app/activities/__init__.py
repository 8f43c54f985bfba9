"""The class tools (the Class tools section), one module each. No Gradio.

    side_by_side.py "Temperature side by side": the prompt sampled at three temperatures, the runs side by side
    game.py         "Guess the next token": a room the class joins by link; each player guesses, the model reveals
    samples.py      "Is it a database?": one question sampled N times, the distinct answers counted, each with the
                    probability the model gives it, beside the greedy answer and the class's prediction
    lens_guess.py   "Which layer knows?": the class guesses the first layer at which the logit lens ranks a step's
                    chosen token first, then the lens reveals it; every guess scored
    export.py       "Export a run": the run on screen as JSON or CSV

A module that defines `TAB` (a `playground.app.tab.Tab` of no view) is a part of the Class tools page, at its
order (`playground.app.tabs`). Each module computes and words its own view; the page's handlers
(`playground.ui.teacher`, `playground.ui.class_game`, `playground.ui.activities`) only call them. The samples run
through the page's own press (`app.play.start_run`, `app.engine_stream.run_events`: the shared batch on the torch
thread); the lens is model work done as a job (`serving.call_job`).
"""

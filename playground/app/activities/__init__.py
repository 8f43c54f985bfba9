"""Class activities that make a class predict, then look (Class tools). No Gradio.

    samples.py      "Is it a database?": one question sampled N times, the distinct answers counted, each with the
                    probability the model gives it, beside the greedy answer and the class's prediction
    lens_guess.py   "Which layer knows?": the class guesses the first layer at which the logit lens ranks a step's
                    chosen token first, then the lens reveals it; every guess scored

Each module computes and words its own view; the page's handlers (`playground.ui.activities`) only call them. The
samples run through the page's own press (`app.play.start_run`, `app.engine_stream.run_events`: the shared batch on
the torch thread); the lens is model work done as a job (`serving.call_job`).
"""

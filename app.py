"""Transformer Playground — the Gradio app (also the Hugging Face Space's app_file)."""

from __future__ import annotations

import gradio as gr


def build_app() -> gr.Blocks:
    with gr.Blocks(title="Transformer Playground") as demo:
        gr.Markdown("# Transformer Playground\nThe interactive panels are being built; see the README.")
    return demo


if __name__ == "__main__":
    build_app().launch()

"""The app's core without Gradio: what the page's handlers call (serving: batched generation)."""

"""The torch thread lives in the app core (`playground.app.torch_thread`); the model registry still
imports it from here."""

from playground.app.torch_thread import NAME, call, iterate, on_torch_thread, runs_on_torch_thread

__all__ = ["NAME", "call", "iterate", "on_torch_thread", "runs_on_torch_thread"]

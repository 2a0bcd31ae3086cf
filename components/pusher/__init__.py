"""The Pusher's executor: TFX's, with a push that a kill leaves either done or invisible to TF
Serving (executor.py)."""

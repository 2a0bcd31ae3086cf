"""The template's Trainer runtime: run_fn (the TFX Trainer's entry), the input pipeline that
applies Transform's graph, distribution strategies and precision, export with its signatures and
warmup, and the multi-worker replica entry
(`python -m pipeline.kubeflow.training_job.worker`). It calls
the
user's code in models/ (build_model, the features); models/ never imports it."""

"""What runs on the user's machine (or CI): compile the pipeline to a KFP spec, check it and the
cluster, upload it, start a run or schedule it (`python -m pipeline.run --runner kubeflow`)."""

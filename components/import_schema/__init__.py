"""ImportSchemaGen: TFX's, run by an executor that does not import TFDV and Beam (executor.py)."""

"""GLUE tasks and raw-text corpora: loading, tokenising, batching."""

"""kdbench: exact, fast, comparable knowledge distillation for BERT-family encoders."""

__version__ = "0.1.0"

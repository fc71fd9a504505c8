"""The frozen teacher and what is computed once from it, one module per job.

- `cache`: the cache keys and the one helper that reads or builds a cache entry of tensors;
- `frozen`: freezing a model and casting its weights to the run's precision;
- `finetune`: the fine-tuned teacher (given, cached, or fine-tuned now and cached);
- `logits`: the teacher's logits table over the training set (stage 2's targets);
- `features`: the teacher's features table over the training set (stage 1's targets).
"""

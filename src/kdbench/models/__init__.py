"""The models kdbench trains, one job per module: `hub` (finding and loading a model), `tiny` (the
test teacher and tokenizer), `pretrained` (the teacher before fine-tuning), `student` (building,
initialising and saving a student), `anatomy` (a model's blocks and heads), `attention` (the
attention implementation and mask), `compilation` (`torch.compile` of the blocks)."""

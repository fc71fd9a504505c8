"""Seconds to build a GLUE-style training loader (its length-grouped sampler reads the `length`
column) from a tokenised `datasets.Dataset` in torch format, as `kdbench.data.glue.tokenize` leaves
it, at SST-2's and MNLI's sizes; synthetic rows, no tokenizer.

    PYTHONPATH=src python benchmarks/loader_build.py [--examples 67349 392702] [--before]

`--before` also times the expression the loader used to read the lengths with,
`torch.as_tensor(dataset["length"])` (one table slice per row under datasets 5). Prints one JSON
line per size.
"""

from __future__ import annotations

import argparse
import json
import time

import datasets
import torch

from kdbench.data.batches import make_loader

SST2, MNLI = 67_349, 392_702  # training examples


def encoded_set(examples: int) -> datasets.Dataset:
    """`examples` rows of token ids of 8 to 71 tokens, with their lengths and labels."""
    lengths = torch.randint(8, 72, (examples,), generator=torch.Generator().manual_seed(0))
    ids = [[101] * n for n in lengths.tolist()]
    encoded = datasets.Dataset.from_dict(
        {"input_ids": ids, "length": lengths.tolist(), "labels": [0] * examples}
    )
    encoded.set_format("torch")
    return encoded


def seconds(build) -> float:
    start = time.perf_counter()
    build()
    return time.perf_counter() - start


def measure(examples: int, before: bool) -> dict:
    encoded = encoded_set(examples)
    result = {
        "examples": examples,
        "datasets": datasets.__version__,
        "loader_s": seconds(
            lambda: make_loader(encoded, None, 32, shuffle=True, group_by_length=True)
        ),
    }
    if before:
        result["row_by_row_lengths_s"] = seconds(lambda: torch.as_tensor(encoded["length"]))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, nargs="+", default=[SST2, MNLI])
    parser.add_argument("--before", action="store_true")
    args = parser.parse_args()
    for examples in args.examples:
        print(json.dumps(measure(examples, args.before)), flush=True)


if __name__ == "__main__":
    main()

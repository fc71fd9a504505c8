"""A distilled student's model card: the Hub's metadata header (YAML front matter) and what the run measured."""

from __future__ import annotations

from pathlib import Path

import yaml


def data_names(plan) -> list[str]:
    """The task's data as the Hub's `datasets` field names it: a Hub id, else the user's file names."""
    user = plan.task.user_data
    if user is None:
        return [plan.data.hf_dataset]
    if user.dataset_name:
        return [user.dataset_name]
    return [path.name for path in user.files.values()]


def metadata(plan, outcome: dict) -> dict:
    """The card's header: what the Hub indexes (library, task, base model, data, metrics and their values)."""
    header = {"library_name": "transformers", "pipeline_tag": "text-classification",
              "tags": ["text-classification", "knowledge-distillation", "kdbench", plan.objective],
              "datasets": data_names(plan), "metrics": sorted({name.split("_")[0] for name in outcome["metrics"]})}
    teacher = plan.teacher.name_or_path
    if teacher and not Path(teacher).exists():  # a Hub id; a local folder is no base model the Hub knows
        header["base_model"] = teacher
    header["model-index"] = [{"name": f"{plan.task.name}-{plan.student.name}-{plan.objective}", "results": [{
        "task": {"type": "text-classification"},
        "dataset": {"name": plan.task.name, "type": data_names(plan)[0]},
        "metrics": [{"type": name, "value": round(value, 2)} for name, value in outcome["metrics"].items()]}]}]
    return header


def score_rows(outcome: dict) -> list[str]:
    teacher = outcome.get("teacher_metrics") or {}
    return [f"| {name} (dev) | {teacher[name]:.2f} | {value:.2f} |" if name in teacher
            else f"| {name} (dev) | | {value:.2f} |" for name, value in outcome["metrics"].items()]


def cost_rows(cost: dict | None) -> list[str]:
    if cost is None:
        return []
    rows = [("parameters", "params", "{:,}"), (f"FLOPs per example ({cost['length']} tokens)", "flops_per_example",
            "{:.3g}"), ("latency, batch 1 (ms)", "latency_ms", "{:.2f}"),
            ("throughput, batch 32 (examples/s)", "throughput_per_s", "{:.1f}")]
    return [f"| {label} | {fmt.format(cost['teacher'][key])} | {fmt.format(cost['student'][key])} |"
            for label, key, fmt in rows]


def speed_line(cost: dict | None) -> str:
    if cost is None:
        return "Cost not measured (measure_cost=false)."
    return (f"The student is {cost['speedup_latency']:.2f}x as fast as its teacher at batch 1 and "
            f"{cost['speedup_throughput']:.2f}x at batch 32, with {100 * cost['params_fraction']:.0f}% of its "
            f"parameters, measured on {cost['device']}.")


def model_card(plan, outcome: dict) -> str:
    """README.md for the saved student: header, scores and costs beside the teacher's, how it was made, usage."""
    header = yaml.safe_dump(metadata(plan, outcome), sort_keys=False)
    kd = plan.kd
    lines = [
        f"---\n{header}---", "",
        f"# {plan.student.name} student for {plan.task.name}, distilled from {plan.teacher.name}", "",
        "Distilled with kdbench (a reproduction of *How to Distill your BERT*, Wang et "
        "al., ACL 2023).", "",
        "| | teacher | student |", "|---|---|---|", *score_rows(outcome), *cost_rows(outcome.get("cost")), "",
        speed_line(outcome.get("cost")), "",
        f"- **Teacher**: {plan.teacher.name} ({plan.teacher.finetuned_path or plan.teacher.name_or_path})",
        f"- **Objective**: {plan.objective} (stage 1), then vanilla KD on the logits (T={kd.temperature}, "
        f"alpha={kd.alpha})",
        f"- **Init**: {plan.init.name} ({plan.init.label})",
        f"- **Data**: {', '.join(data_names(plan))}; labels {list(plan.task.labels) or 'a score (regression)'}",
        f"- **Chain**: {' -> '.join(plan.chain)}", "",
        "## Use", "", "```python", "from transformers import pipeline", "",
        'classifier = pipeline("text-classification", model="path/to/this/folder")',
        'print(classifier("' + ('first text", text_pair="second text' if len(plan.task.text_fields) == 2
                               else "some text") + '"))', "```", "",
    ]
    return "\n".join(lines)

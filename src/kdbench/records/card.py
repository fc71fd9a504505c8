"""A distilled student's model card: the Hub's metadata header (YAML front matter) and what the
run measured."""

from __future__ import annotations

from pathlib import Path

import yaml

from kdbench.metrics import scores_only
from kdbench.objectives.losses import LOSSES
from kdbench.objectives.tensors import LOGITS
from kdbench.records.rates import contended

SIZE_ROWS = (  # (label, the cost field, its format): what the model is, whatever the machine
    ("parameters", "params", "{:,}"),
    ("FLOPs per example", "flops_per_example", "{:.3g}"),
)
TIMING_ROWS = (  # measured: published only from a machine no other work competed for
    ("latency, batch 1 (ms)", "latency_ms", "{:.2f}"),
    ("throughput, batch 32 (examples/s)", "throughput_per_s", "{:.1f}"),
)


def hub_datasets(plan) -> list[str]:
    """The task's data as the Hub's `datasets` field names it: its Hub id (GLUE's, read from the Hub
    or from local copies of its files, or the user's Hub dataset); none for the user's own files."""
    user = plan.task.user_data
    if user is None:
        return [plan.data.hf_dataset]
    return [user.dataset_name] if user.dataset_name else []


def data_text(plan) -> str:
    """The task's data as the card's text names it: its Hub id, or the user's file names."""
    if hub := hub_datasets(plan):
        return ", ".join(hub)
    files = ", ".join(path.name for path in plan.task.user_data.files.values())
    return f"{files} (local files)"


def model_index(plan, metrics: dict) -> dict:
    """The Hub's `model-index`: the student's dev scores on the task, where the task's data has a
    Hub id (the Hub reads a result's dataset `type` as one); none for the user's own files, whose
    scores the card's table gives."""
    if not (hub := hub_datasets(plan)):
        return {}
    scores = [{"type": name, "value": round(value, 2)} for name, value in metrics.items()]
    result = {
        "task": {"type": "text-classification"},
        "dataset": {"name": plan.task.name, "type": hub[0]},
        "metrics": scores,
    }
    name = f"{plan.task.name}-{plan.student.name}-{plan.objective}"
    return {"model-index": [{"name": name, "results": [result]}]}


def metadata(plan, outcome: dict) -> dict:
    """The card's header: what the Hub indexes (library, task, base model, data, metrics and their
    values)."""
    header = {
        "library_name": "transformers",
        "pipeline_tag": "text-classification",
        "tags": ["text-classification", "knowledge-distillation", "kdbench", plan.objective],
        **({"datasets": hub} if (hub := hub_datasets(plan)) else {}),
        "metrics": sorted({name.split("_")[0] for name in scores_only(outcome["metrics"])}),
    }
    return header | base_model(plan) | model_index(plan, scores_only(outcome["metrics"]))


def base_model(plan) -> dict:
    """The Hub's `base_model`: the teacher's Hub id (a local folder is no base model there)."""
    teacher = plan.teacher.name_or_path
    return {"base_model": teacher} if teacher and not Path(teacher).exists() else {}


def score_rows(outcome: dict) -> list[str]:
    teacher = outcome.get("teacher_metrics") or {}
    return [
        f"| {name} (dev) | {teacher[name]:.2f} | {value:.2f} |"
        if name in teacher
        else f"| {name} (dev) | | {value:.2f} |"
        for name, value in scores_only(outcome["metrics"]).items()
    ]


def cost_rows(cost: dict | None) -> list[str]:
    if cost is None:
        return []
    rows = SIZE_ROWS if contended(cost) else SIZE_ROWS + TIMING_ROWS
    return [
        f"| {label} | {fmt.format(cost['teacher'][key])} | {fmt.format(cost['student'][key])} |"
        for label, key, fmt in rows
    ]


def speed_line(cost: dict | None) -> str:
    """Where and how the cost was measured, and the student's gains: its speed-ups only when no
    other work competed for the cores (`rates.contended`)."""
    if cost is None:
        return "Cost not measured (measure_cost=false)."
    size = (
        f"{100 * cost['params_fraction']:.0f}% of its parameters and "
        f"{100 * cost['flops_fraction']:.0f}% of its FLOPs"
    )
    where = f"Measured on {cost['device']}{load_text(cost)} at the task's median length "
    if contended(cost):
        return (
            f"{where}({cost['length']} tokens): the student has {size}. Its latency and "
            "throughput are left out: other work competed for the cores (they are published "
            "only when the load average is at most the CPU count)."
        )
    return (
        f"{where}({cost['length']} tokens): the student is {cost['speedup_latency']:.2f}x as fast "
        f"as its teacher at batch 1 and {cost['speedup_throughput']:.2f}x at batch 32, with "
        f"{size}."
    )


def load_text(cost: dict) -> str:
    """The machine's load while timing, as the record states it (older records do not)."""
    if "load_1min" not in cost:
        return ""
    return f" (1-minute load average {cost['load_1min']:.2f} on {cost['cpu_count']} CPUs)"


def teacher_text(teacher) -> str:
    """The teacher's name, and the checkpoint it was read from where it names one."""
    source = teacher.finetuned_path or teacher.name_or_path
    return f"{teacher.name} ({source})" if source else teacher.name


def init_text(init) -> str:
    """The init's name, with the teacher layers it copied: "every_kth (4,8,12)", "random"."""
    return init.name if init.label == init.name else f"{init.name} ({init.label})"


def recipe_lines(plan, data: str) -> list[str]:
    """Teacher, objective (each distillation stage's terms), init, `data` (its line) and chain."""
    return [
        f"- **Teacher**: {teacher_text(plan.teacher)}",
        f"- **Objective**: {objective_text(plan)}",
        f"- **Init**: {init_text(plan.init)}",
        data,
        f"- **Chain**: {' -> '.join(plan.chain)}",
    ]


def objective_text(plan) -> str:
    """The stages that distilled, each with its terms: "intermediate: att_kl (padding=masked); then
    prediction: kd (alpha=0.5, temperature=2.0)"."""
    stages = [stage for stage in plan.stages.values() if stage.terms and stage.runs]
    regression = plan.task.regression
    return "; then ".join(
        f"{stage.name}: {', '.join(term_text(term, regression) for term in stage.terms)}"
        for stage in stages
    )


def term_text(term, regression: bool) -> str:
    """A term with the parameters its loss reads on the task (a regression's `kd` no
    temperature)."""
    unread = LOSSES[term.loss].classification_params if regression else ()
    params = ", ".join(
        f"{name}={value}" for name, value in sorted(term.params.items()) if name not in unread
    )
    return f"{term.name} ({params})" if params else term.name


def usage_lines(plan) -> list[str]:
    pair = len(plan.task.text_fields) == 2
    call = (
        'classifier({"text": "first text", "text_pair": "second text"}, truncation=True)'
        if pair
        else 'classifier("some text", truncation=True)'
    )
    return [
        "## Use",
        "",
        "```python",
        "from transformers import pipeline",
        "",
        'classifier = pipeline("text-classification", model="path/to/this/folder")',
        f"print({call})",
        "```",
        "",
        f"`truncation=True` reads at most {plan.trainer.max_length} tokens, as the student was "
        "trained and scored.",
        answer_line(plan),
        "",
    ]


def answer_line(plan) -> str:
    """What `pipeline` answers: a label name, or a regression's raw score (problem_type regression:
    no function applied to the single output)."""
    if plan.task.labels:
        return f"It answers a label, one of {', '.join(plan.task.labels)}, and its probability."
    return (
        "It answers the predicted score itself, on the task's scale, as `score` (the label "
        "`LABEL_0` names the single output); saved with problem_type regression, no sigmoid "
        "is applied to it."
    )


def model_card(plan, outcome: dict) -> str:
    """README.md for the saved student: header, scores and costs beside the teacher's, how it was
    made, how to use it."""
    header = yaml.safe_dump(metadata(plan, outcome), sort_keys=False)
    labels = list(plan.task.labels) or "a score (regression)"
    title = (
        f"# {plan.student.name} student for {plan.task.name}, distilled from {plan.teacher.name}"
    )
    lines = [
        f"---\n{header}---",
        "",
        title,
        "",
        "Distilled with kdbench (a reproduction of *How to Distill your BERT*, Wang et al., "
        "ACL 2023).",
        "",
        "| | teacher | student |",
        "|---|---|---|",
        *score_rows(outcome),
        *cost_rows(outcome.get("cost")),
        "",
        speed_line(outcome.get("cost")),
        "",
        *chosen_lines(outcome.get("scored")),
        *recipe_lines(plan, f"- **Data**: {data_text(plan)}; labels {labels}"),
        "",
        *usage_lines(plan),
    ]
    return "\n".join(lines)


def chosen_lines(scored: dict | None) -> list[str]:
    """Where the saved student is its best dev checkpoint (the record's `scored`), a line saying so:
    chosen on the dev set its scores are of, they lean high. None for the last step's."""
    if not scored or scored.get("checkpoint") != "best":
        return []
    return [
        f"The student is its {scored['stage']} stage's best checkpoint (step {scored['step']} of "
        f"dev evaluations every {scored['eval_every']} steps, chosen by {scored['selected_by']}): "
        "its scores are of the dev set that chose it, so they lean high.",
        "",
    ]


def agnostic_card(plan, outcome: dict) -> str:
    """README.md for a task-agnostic student: its MLM head trained (`fill-mask`) where the objective
    reads MLM logits, else an encoder for `AutoModel` (its MLM head left as initialised); its
    held-out losses, how it was made, and its fine-tuning."""
    trained = any(term.feature == LOGITS for term in plan.terms)
    header = {
        "library_name": "transformers",
        "pipeline_tag": "fill-mask" if trained else "feature-extraction",
        "tags": ["knowledge-distillation", "kdbench", plan.objective],
    } | base_model(plan)
    corpus = plan.corpus
    source = f"{corpus.path.name} (local files)" if corpus.path else corpus.name
    use = (
        'pipeline("fill-mask", model="path/to/this/folder"): its MLM head is trained'
        if trained
        else 'AutoModel.from_pretrained("path/to/this/folder"): its MLM head is untrained (the '
        "objective reads no MLM logits), so fill-mask predictions mean nothing"
    )
    return "\n".join(
        [
            f"---\n{yaml.safe_dump(header, sort_keys=False)}---",
            "",
            f"# {plan.student.name} student distilled from {plan.teacher.name}, task-agnostic",
            "",
            "| held-out loss | student |",
            "|---|---|",
            *(f"| {name} | {value:.4g} |" for name, value in outcome["metrics"].items()),
            "",
            *recipe_lines(plan, f"- **Corpus**: {source}, sequences of {corpus.seq_len} tokens"),
            "",
            f"Use: {use}. Fine-tune it on a task with kdbench's setting=finetune.",
            "",
        ]
    )

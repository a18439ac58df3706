"""`cuba-memorys eval`: measure retrieval on a benchmark; `--compare` two saved runs."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import click

from cuba_memorys.cli.app import command, open_memory, print_json
from cuba_memorys.config import OOD_FIT_MAX, OOD_FIT_MIN, Settings
from cuba_memorys.errors import InvalidInput
from cuba_memorys.services.benchmarks import evaluation


def _dataset_files(dataset: Path, corpus: Path | None) -> tuple[Path | None, Path]:
    """A benchmark folder holds corpus.jsonl[.gz] and queries*.jsonl; a file is the questions."""
    if dataset.is_dir():
        corpora = sorted(dataset.glob("corpus.jsonl*"))
        questions = sorted(dataset.glob("queries*.jsonl"))
        if not corpora or not questions:
            raise InvalidInput("dataset", f"{dataset} has no corpus.jsonl[.gz] and queries*.jsonl")
        return corpus or corpora[0], questions[0]
    return corpus, dataset


def _options(pairs: tuple[str, ...]) -> dict:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise InvalidInput("--option", f"{pair!r} is not key=value")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


@command(name="eval")
@click.option("--dataset", "-d", type=click.Path(path_type=Path), help="Benchmark folder, or a questions JSONL file.")
@click.option("--corpus", type=click.Path(path_type=Path), help="Corpus JSONL[.gz] (one store per conversation).")
@click.option("--conversations", type=click.IntRange(1), help="Only the first N conversations.")
@click.option("--option", "option_pairs", multiple=True, help="Extra cuba_faro argument, key=value (JSON value).")
@click.option("--entity-field", type=click.Choice(evaluation.ENTITY_FIELDS), default="session", show_default=True,
              help="Write each corpus row to its session's entity, or to its speaker's (so questions name it).")
@click.option("--out", type=click.Path(path_type=Path), help="Save per-question results (for --compare).")
@click.option("--compare", nargs=2, type=click.Path(exists=True, path_type=Path), help="BEFORE.json AFTER.json")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def eval_cmd(dataset, corpus, conversations, option_pairs, entity_field, out, compare, as_json) -> None:
    """Retrieval benchmark: nDCG@10, R@5, R@10, MRR per category, abstention, tokens, latency.

    With a corpus, each conversation is loaded into a fresh embedded store through batch_add in
    chunks of 100 (as outside checks do) and every question is asked with cuba_faro limit 10.
    Without one, questions ({query, relevant_ids}) are asked against the configured memory.
    """
    if compare:
        before, after = (json.loads(p.read_text())["results"] for p in compare)
        _show_compare(evaluation.compare(before, after), as_json)
        return
    if dataset is None:
        raise InvalidInput("--dataset", "is required (a benchmark folder or a questions JSONL file)")
    stats: dict = {}
    results = _run(dataset, corpus, conversations, _options(option_pairs), stats, entity_field)
    summary = evaluation.summarize(results)
    summary["ingest"] = stats
    if out:
        out.write_text(json.dumps({"summary": summary, "options": list(option_pairs), "results": results}))
    print_json(summary) if as_json else _show_summary(summary)


def _run(dataset: Path, corpus: Path | None, conversations: int | None, options: dict,
         stats: dict, entity_field: str = "session") -> list[dict]:
    corpus_path, questions = _dataset_files(dataset, corpus)
    if corpus_path is None:
        with open_memory() as mem:
            return evaluation.run_on_memory(mem, questions, options=options)
    settings = Settings.from_env()
    started = time.time()
    return evaluation.run_benchmark(
        replace(settings), corpus_path, questions, options=options, conversations=conversations, stats=stats,
        entity_field=entity_field,
        progress=lambda name: click.echo(f"  {name} done ({time.time() - started:.0f}s)", err=True))


def _show_summary(summary: dict) -> None:
    click.echo(f"{'category':<28}{'n':>5}{'nDCG@10':>9}  {'95% CI':<16}{'R@5':>7}{'R@10':>7}{'MRR':>7}")
    for name, s in summary.items():
        if isinstance(s, dict) and "ndcg10" in s:
            ci = f"[{s['ndcg10_ci'][0]:.3f}, {s['ndcg10_ci'][1]:.3f}]"
            click.echo(f"{name:<28}{s['n']:>5}{s['ndcg10']:>9.3f}  {ci:<16}"
                       f"{s['r5']:>7.3f}{s['r10']:>7.3f}{s['mrr']:>7.3f}")
    a, lat, tok = summary["abstention"], summary["latency_ms"], summary["response_tokens"]
    click.echo(f"abstention accuracy {a['accuracy']:.3f} (abstained on {a['abstained_on_unanswerable']:.3f} of"
               f" {a['unanswerable']} unanswerable, {a['abstained_on_answerable']:.3f} of answerable)")
    click.echo(f"latency p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms; response tokens mean {tok['mean']:.0f}")
    if summary.get("ingest", {}).get("rows_truncated"):
        click.echo(f"note: {summary['ingest']['rows_truncated']} corpus rows were longer than 10,000 characters"
                   " and were cut to that length")


def _show_compare(result: dict, as_json: bool) -> None:
    if as_json:
        print_json(result)
        return
    click.echo(f"{'category':<28}{'n':>5}{'before':>9}{'after':>9}{'diff':>9}  95% CI (paired bootstrap)")
    for name, c in result.items():
        click.echo(f"{name:<28}{c['n']:>5}{c['before']:>9.3f}{c['after']:>9.3f}{c['diff']:>+9.3f}"
                   f"  [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]")


@command(name="calibrate")
@click.option("--dataset", "-d", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSONL of questions this memory should answer ({\"query\": ...} per line).")
@click.option("--alpha", default=0.05, show_default=True, type=float,
              help="Share of in-distribution questions allowed to be refused.")
@click.option("--samples", type=click.IntRange(OOD_FIT_MIN, OOD_FIT_MAX, clamp=True), default=None,
              help=f"Stored embeddings the model is fitted on, {OOD_FIT_MIN}-{OOD_FIT_MAX} (default:"
                   " CUBA_OOD_FIT_LIMIT, 5000).")
@click.option("--apply", is_flag=True,
              help="Store the threshold with the data (used when no argument or CUBA_OOD_THRESHOLD is set).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def calibrate_cmd(dataset: Path, alpha: float, samples: int | None, apply: bool, as_json: bool) -> None:
    """Calibrate the out-of-distribution threshold (conformal, from your own questions)."""
    from cuba_memorys.services.benchmarks.calibration import calibrate

    with open_memory(overrides={"ood_fit_limit": samples} if samples is not None else None) as mem:
        result = calibrate(mem, dataset, alpha=alpha, apply=apply)
    if as_json:
        print_json(result)
        return
    in_use = result["threshold_in_use"]
    click.echo(f"{result['questions']} questions, alpha {alpha}: threshold {result['threshold']:.2f}"
               f" (in use: {'none' if in_use is None else f'{in_use:.2f}'} from {result['threshold_in_use_source']};"
               f" sqrt(chi2_0.99(d)) = {result['default_threshold']:.2f} would refuse"
               f" {result['would_abstain_with_default']:.0%} of these)")
    click.echo(f"would refuse {result['would_abstain_with_new']:.1%} of these questions with the new"
               f" threshold, {result['would_abstain_with_current']:.1%} with the one in use")
    click.echo("applied: stored with the data" if apply else "not applied (use --apply to store it)")

"""OUT/README.md, a pure function of OUT/results.json (and the runs' metrics for the curves):
`nnlm reproduce --out R --report-only` rewrites it without a corpus or a net in memory.

Every row of the table is shown, built or not: a row the budget shortened or skipped says why,
with the numbers the planner had; each net says which options trained it."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from nnlm.errors import NnlmError
from nnlm.io import atomic_write_text
from nnlm.reproduce import beyond_plot, beyond_report, plan_report, plots, results
from nnlm.reproduce.planner import AS_PLANNED, EXPECTED_EPOCHS
from nnlm.reproduce.table import Row
from nnlm.reproduce.tables import PaperTable, get_table

Rows = dict[str, dict[str, Any]]


def fmt(x: float | None, digits: int = 0) -> str:
    return "" if x is None else f"{x:,.{digits}f}"


def best_ngram(rows: Rows, paper: PaperTable | None = None) -> tuple[str, float | None]:
    """The n-gram row of lowest test perplexity: what our ratios divide by."""
    tests = {r.id: rows[r.id]["perplexity"]["test"] for r in (paper or get_table(None)).ngram_rows
             if (rows.get(r.id) or {}).get("perplexity", {}).get("test")}
    best_id = min(tests, key=tests.get) if tests else ""
    return best_id, tests.get(best_id)


def describe_recipe(values: dict[str, Any]) -> str:
    """The recipe sentence of `nnlm train` (Recipe.describe) from a results key's recipe values."""
    from dataclasses import fields

    from nnlm.neural.run.recipes import Recipe

    known = {f.name for f in fields(Recipe)}
    try:
        return Recipe(**{k: v for k, v in values.items() if k in known}).describe()
    except (TypeError, KeyError):  # a key from an older nnlm: say what it holds
        return f"{values.get('name')} recipe ({', '.join(f'{k} {v}' for k, v in values.items() if k != 'name')})"


def training_text(options: dict[str, Any] | None) -> str:
    """How a net was trained, from its results key."""
    if not options:
        return "options not recorded (a results.json from before rows were keyed by their options)"
    r, loss = options.get("recipe", {}), options.get("loss", "full")
    layer = ("the exact softmax" if loss == "full" else
             f"the {'importance-sampled softmax' if loss == 'sampled' else 'NCE'} output layer "
             f"(`--loss {loss}`, K = {options.get('samples')} samples per batch; scored with the exact softmax)")
    text = f"`nnlm train`'s {describe_recipe(r)}, trained with {layer}"
    if options.get("hogwild"):
        text += (f", by {options['hogwild']} asynchronous Hogwild workers (`--hogwild {options['hogwild']}`: faster on "
                 "as many cores, but no two runs give the same weights)")
    return text


def nets_lines(rows: Rows, nets: list[str]) -> list[str]:
    """The 'Nets:' paragraph: one line when every net shares its options, else one per net; then where they are
    (runs/<net>-<tag>, the tag naming the options)."""
    keyed = {net: rows[net].get("options") for net in nets if rows.get(net, {}).get("perplexity")}  # trained
    if not keyed:
        return []
    texts = {net: training_text(opts) for net, opts in keyed.items()}
    tail = "; `nnlm reproduce --loss full` trains them with the full softmax as the paper did."
    runs = [f"`{rows[net]['run']}`" for net in keyed if rows[net].get("run")]
    where = ["Their run directories, under this report's directory (for `nnlm eval`, `nnlm generate`, "
             f"`nnlm.load`): {', '.join(runs)}.", ""] if runs else []
    if len(set(texts.values())) == 1:
        return ["Nets: " + next(iter(texts.values())) + tail, "", *where]
    return ["Nets, each with its own options:", "", *(f"- {net.upper()}: {text}" for net, text in texts.items()), "",
            *where]


def budget_lines(rows: Rows, ordered: list[Row], call: dict[str, Any]) -> list[str]:
    """Which rows the budget shortened or skipped, and why, before the table."""
    budget_minutes = call.get("budget_minutes")
    lines = ["Budget: " + ("not recorded (a results.json from before calls were recorded)." if "nets" not in call
                           else f"{budget_minutes:g} minutes for the whole call." if budget_minutes is not None
                           else "none (`--full`): every net trains until early stopping.")]
    cut = [(row, rows[row.id]) for row in ordered if row.id in rows and rows[row.id].get("cut")]
    def kind(res: dict[str, Any]) -> str:
        status = res.get("status", "shortened")
        return "planned" if status == "shortened" and AS_PLANNED in res.get("note", "") else status

    for status, title in (("shortened", "Shortened for lack of budget"), ("skipped", "Skipped for lack of budget"),
                          ("planned", f"Trained the ~{EXPECTED_EPOCHS} epochs planned, not early-stopped")):
        names = ", ".join(f"{row.label} (n = {row.n})" for row, res in cut if kind(res) == status)
        if names:
            lines.append(f"**{title}**: {names}.")
    unscored = [(row, rows[row.id]) for row in ordered if rows.get(row.id, {}).get("train_pending")]
    if unscored:
        lines.append("**Train perplexity not scored for lack of budget** (the train split is scored last): "
                     + ", ".join(row.label + (f" ({res['train_note']})" if res.get("train_note") else "")
                                 for row, res in unscored) + ".")
    if cut or unscored:
        lines.append("The note column says why, with the budget left and the estimated need. The same command with a "
                     "larger `--budget-minutes` (or `--full`) continues them: finished rows are kept, cut clusterings "
                     "and training runs resume.")
    else:
        lines.append("No row was shortened or skipped for lack of budget.")
    return [" ".join(lines), ""]


def commit_line(rows: Rows, ordered: list[Row], current: str) -> str:
    """The commit(s) whose code built the rows: a resumed reproduction may span several."""
    built = results.built_by(rows, [row.id for row in ordered])
    if set(built) <= {"unrecorded"}:
        return f"Commit: `{current}`  "
    if len(built) == 1:
        return f"Commit: `{next(iter(built))}`  "
    parts = [f"`{sha}` ({', '.join(ids)})" for sha, ids in built.items()]
    return "Commits (rows built by calls at different commits; row ids as in results.json): " + "; ".join(parts) + "  "


def table_line(row: Row, res: dict[str, Any] | None, best: float | None, paper_best: float) -> str:
    p = (res or {}).get("perplexity") or {}
    ours_test = p.get("test")
    paper_ratio = row.paper[2] / paper_best if row.paper[2] else None
    our_ratio = ours_test / best if (ours_test and best) else None
    direct = "" if row.direct is None else ("yes" if row.direct else "no")
    if res is None:
        time_cell, note = "not run", ""
    elif res.get("status") in ("skipped", "not applicable"):
        time_cell, note = "skipped", res.get("note", "")
    else:
        time_cell, note = duration(res.get("seconds", 0.0)), res.get("note", "")
    return (f"| {row.label} | {row.n} | {fmt(row.h) if row.h is not None else ''} | {fmt(row.m) if row.m else ''} "
            f"| {direct} | {row.mix} | {fmt(row.paper[0])} | {fmt(row.paper[1])} | {fmt(row.paper[2])} "
            f"| {fmt(p.get('train'), 1)} | {fmt(p.get('valid'), 1)} | {fmt(ours_test, 1)} "
            f"| {fmt(paper_ratio, 3)} | {fmt(our_ratio, 3)} | {fmt((res or {}).get('parameters'))} "
            f"| {time_cell} | {note.replace('|', chr(92) + '|')} |")


def shaped(row: Row, rows: Rows) -> Row:
    """A net's row (or its mix's) as the net was trained: its architecture columns follow the shape its
    run recorded when that is not its preset's (Table 2's net without direct connections)."""
    import dataclasses

    shape = (rows.get(row.net) or {}).get("shape") if row.net else None
    if not shape:
        return row
    fields = {"direct": shape.get("direct", row.direct), "h": shape.get("hidden", row.h),
              "m": shape.get("features", row.m), "n": shape.get("order", row.n)}
    label = row.label + ("" if row.id != row.net else " (no direct connections)" if shape.get("direct") is False
                         else " (class-factored output)" if shape.get("output_layer") == "classes" else "")
    return dataclasses.replace(row, label=label, **fields)


def vocabulary_lines(call: dict[str, Any]) -> list[str]:
    """Which vocabulary every row of the table used (a text directory's --min-count / --max-vocab)."""
    vocab = call.get("vocabulary")
    if not vocab:
        return []
    cap = (f"capped at the {vocab['max_vocab']:,} most frequent words (`--max-vocab {vocab['max_vocab']}`)"
           if vocab.get("max_vocab") else "not capped (its natural vocabulary; `--max-vocab` caps it)")
    return [f"Vocabulary (every row): |V| = {vocab['size']:,} tokens, words seen fewer than {vocab['min_count']} "
            f"times in train are `<unk>` (`--min-count {vocab['min_count']}`), {cap}.", ""]


def duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def write_report(out: Path) -> Path:
    """OUT/README.md, curves.png and perplexities.png from OUT/results.json; returns the README's path."""
    path = out / "results.json"
    if not path.exists():
        raise NnlmError(f"{out} holds no results.json: run `nnlm reproduce --out {out}` first")
    data = results.read(path)
    rows: Rows = data.get("rows", {})
    call, info = data.get("call", {}), data.get("corpus_info") or {"name": data["corpus"]["corpus"]}
    paper = get_table(call.get("table"))
    nets = call.get("nets") or [n for n in ("mlp1", "mlp3", "mlp5", "mlp7", "mlp9") if n in rows]
    ordered = [shaped(row, rows) for row in paper.rows(nets)]
    best_id, best = best_ngram(rows, paper)
    name = info["name"]
    protocol = ", `bengio2003` protocol (docs/protocol.md)" if name == "brown" else ""
    sizes = (f"{info['train']:,} / {info['valid']:,} / {info['test']:,} tokens, |V| = {info['vocab']:,} "
             if "train" in info else "")
    lines = [
        f"# {paper.title}, reproduced on {name}", "",
        f"Command: `{call.get('command', 'unrecorded')}`  ",
        commit_line(rows, ordered, call.get("commit", "unknown")),
        f"Corpus: {name}{protocol}: {sizes}"
        f"({paper.paper_corpus}).", "",
        *vocabulary_lines(call),
        "Perplexity = exp(-mean ln P) over every token of a split (markers and `<unk>` included). "
        "Mixes are with the deleted-interpolation trigram: 0.5/0.5 as the paper, or weights fitted by EM on "
        "validation, one pair per context-frequency bucket of the trigram (the paper's third way to mix). "
        "Ratio = test perplexity / the best n-gram's test perplexity of the same table "
        f"(paper: {paper.best_ngram}, {paper.best_ngram_test:.0f}; ours: {best_id or 'none built'}, {fmt(best, 1)}).",
        "",
        *nets_lines(rows, nets),
        *budget_lines(rows, ordered, call),
        "| model | n | h | m | direct | mix | paper train | paper valid | paper test | ours train | ours valid "
        "| ours test | ratio paper | ratio ours | parameters | time | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(table_line(row, rows.get(row.id), best, paper.best_ngram_test) for row in ordered),
        "", *plan_report.plan_lines(rows, nets, call),
        "![learning curves](curves.png)", "", "![test perplexities](perplexities.png)", "",
        *(beyond := beyond_report.section_lines(data)),  # none without --beyond
    ]
    atomic_write_text(out / "README.md", "\n".join(lines) + "\n")
    plots.curves(out, rows, nets, name)
    plots.bars(out, rows, ordered, best_id, best, paper.best_ngram_test)
    if beyond:
        beyond_plot.ratios(out, data)
    return out / "README.md"

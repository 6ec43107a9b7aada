"""The "Beyond the paper" section of OUT/README.md, from results.json alone (empty without --beyond)."""
from __future__ import annotations

from typing import Any

from nnlm.reproduce.beyond_rows import KEY, NGRAM_PARTS, ngram_save_command
from nnlm.reproduce.results import built_by

Rows = dict[str, dict[str, Any]]
PLOT = "beyond.png"  # the section's plot, beside README.md (beyond_plot)


def _fmt(x: float | None, digits: int = 1) -> str:
    return "" if x is None else f"{x:,.{digits}f}"


def _time(entry: dict[str, Any]) -> str:
    """A net's training time; a mix's fit, with its parts' training time (the real cost of a mix)."""
    if entry.get("status") in ("skipped", "not applicable"):
        return "skipped"
    own = entry.get("seconds", 0.0)
    text = f"{own:.1f} s" if own < 120 else f"{own / 60:.1f} min"
    if "parts_seconds" in entry:
        text = f"fit {text}; parts {entry['parts_seconds'] / 60:.1f} min"
    return text


def _line(label: str, entry: dict[str, Any], kn5: float | None) -> str:
    p = entry.get("perplexity") or {}
    test = p.get("test")
    ratio = _fmt(test / kn5, 3) if test and kn5 else ""
    weights = entry.get("mean_weights")
    note = entry.get("note", "") + (f" weights {', '.join(f'{w:.2f}' for w in weights)}" if weights else "")
    if weights and len(entry.get("weights", [])) > 1:
        note += " (mean over buckets)"
    params = entry.get("parameters")
    return (f"| {label} | {'' if params is None else f'{params:,}'} | {_time(entry)} | {_fmt(p.get('valid'))} "
            f"| {_fmt(test)} | {ratio} | `{entry.get('command', '')}` | {note.strip().replace('|', chr(92) + '|')} |")


def section_ids(data: dict[str, Any]) -> list[str]:
    """The section's row ids in results.json, in the last section call's order (else in the file's)."""
    rows: Rows = data.get("rows", {})
    ids = data.get("call", {}).get("beyond_rows") or [k.removeprefix(KEY) for k in rows if k.startswith(KEY)]
    return [i for i in ids if KEY + i in rows]


def section_lines(data: dict[str, Any]) -> list[str]:
    """The section's markdown lines, or [] when the call built no section row."""
    rows: Rows = data.get("rows", {})
    call = data.get("call", {})
    present = section_ids(data)
    if not present:
        return []
    kn5 = ((rows.get("kn5") or {}).get("perplexity") or {}).get("test")
    minutes = call.get("beyond_minutes")
    best = _best(rows, present)
    lines = [
        "## Beyond the paper", "",
        _commit_line(rows, present), "",
        "Nets past the paper (a recurrent NPLM, deeper and wider feed-forward nets, the paper's section-5 "
        "extensions), nets of Table 1's shapes trained with other seeds, ensembles of them (their "
        "probabilities averaged), and mixtures with Table 1's Kneser-Ney 5-gram, class-based trigram (c = 500) and "
        "deleted-interpolation trigram (or with every n-gram row of Table 1, where the row says so), the weights "
        "fitted by EM on validation, one set per context-frequency bucket "
        "of the trigram. Test is read once, with the weights validation chose. Ratio = test perplexity / KN5's test "
        f"perplexity ({_fmt(kn5)}).", "",
        "Budget: " + ("none: every net trained until early stopping." if minutes is None
                      else f"{minutes:g} minutes for the section, planned after Table 1 and apart from its budget."),
        *_ngram_parts(rows, present), "",
        *_reference_lines(rows, present, kn5, call.get("beyond_reference")),
        *best, "",
        "| row | parameters | time | valid | test | ratio to KN5 | command | note |",
        "|---|---|---|---|---|---|---|---|",
        *(_line(i, rows[KEY + i], kn5) for i in present), "",
        f"![Beyond the paper: test ratios to KN5]({PLOT})", "",
    ]
    return lines


def _commit_line(rows: Rows, ids: list[str]) -> str:
    """The commit(s) whose code built the section's rows (Table 1's line names those of its own rows: a section
    added to a finished Table 1 may come from a later commit)."""
    built = built_by(rows, [KEY + i for i in ids])
    if not built:
        return "Commit: no row of the section was built."
    return "Section built at " + ", ".join(f"`{sha}` ({len(keys)} rows)" for sha, keys in built.items()) + "."


def is_reference(entry: dict[str, Any]) -> bool:
    """The row of a model that is not nnlm's (the LSTM reference): shown, never mixed or counted as a net."""
    return "reference" in entry


def _reference_lines(rows: Rows, ids: list[str], kn5: float | None, place: str | None) -> list[str]:
    """What the LSTM reference is, how it was budgeted and what it reached (none: no line)."""
    refs = [i for i in ids if is_reference(rows[KEY + i])]
    if not refs:
        return []
    entry = rows[KEY + refs[0]]
    p = entry.get("perplexity") or {}
    where = {"first": "first, before the nets,", "last": "last among the nets, after them,"}.get(place or "", "")
    r = (entry.get("options") or {}).get("recipe") or {}
    recipe = (f"{r.get('layers')} LSTM layers of {r.get('size')}, dropout {r.get('dropout')}, SGD at {r.get('lr')}, "
              f"back-propagation through {r.get('bptt')} steps, {r.get('epochs')} epochs")
    text = ("**The LSTM reference** (`lstm-reference`; not an nnlm net: no mix names it and it is not counted as "
            "the best single net) is PyTorch's `word_language_model` example with `--tied` as a user runs it "
            f"({recipe}), written in nnlm (`nnlm.reproduce.lstm_reference`), trained on the same files on the same "
            "host and scored by the same perplexity function. ")
    plan = entry.get("plan") or {}
    if plan.get("beside"):
        text += ("Its budget is the one the nets share: it trained beside them, in a process of its own on one "
                 "thread, for the section's budget less the mixes' reserve (its test scoring included), while the "
                 "nets trained one after another on one thread")
    else:
        text += ("Its budget is a section net's: planned " + (f"{where} " if where else "")
                 + "by the nets' rule (all the epochs it wants if they are left, else what is left, skipped below 2 "
                 "epochs)")
    if plan.get("beside") and "work_minutes" in plan:
        text += f" ({_time({'seconds': 60 * plan['work_minutes']})})"
    elif "work_minutes" in plan:
        text += f"; it was granted {_time({'seconds': 60 * plan['work_minutes']})} of training ({plan.get('status')})"
    if p.get("test"):
        text += (f" and trained {entry.get('epochs', 0):.2f} epochs in {_time(entry)}: "
                 f"valid {_fmt(p.get('valid'))}, test {_fmt(p['test'])}"
                 + (f" = **{p['test'] / kn5:.3f} x KN5**" if kn5 else ""))
    elif entry.get("status") == "skipped":
        text += f"; it was skipped: {entry.get('note', '')}"
    return [text + ".", ""]


def _ngram_parts(rows: Rows, ids: list[str]) -> list[str]:
    """Where the built mixes' n-gram parts come from: one `nnlm ngram --save` each (none: no line)."""
    named = {p for i in ids if rows[KEY + i].get("status") != "skipped" for p in rows[KEY + i].get("parts", ())}
    commands = [f"`{ngram_save_command(p)}`" for p in NGRAM_PARTS if p in named]
    if not commands:
        return []
    return ["The n-gram parts of the `nnlm mix` commands are saved once by " + ", ".join(commands) + "."]


def _best(rows: Rows, ids: list[str]) -> list[str]:
    """One line: the best single net and the best mix, by validation (the choice test does not make)."""
    def valid(i: str) -> float:
        return ((rows[KEY + i].get("perplexity") or {}).get("valid")) or float("inf")

    nets = [i for i in ids if "parts" not in rows[KEY + i] and not is_reference(rows[KEY + i])
            and valid(i) < float("inf")]
    mixes = [i for i in ids if "parts" in rows[KEY + i] and valid(i) < float("inf")]
    text = []
    for what, group in (("single net", nets), ("mix", mixes)):
        if group:
            best = min(group, key=valid)
            p = rows[KEY + best]["perplexity"]
            text.append(f"best {what} by validation: {best} (valid {_fmt(p['valid'])}, test {_fmt(p.get('test'))})")
    return ["; ".join(text).capitalize() + "." if text else "No row was built."]

"""``gyrectl replay``: the recorded trajectory trees of a run (or of a capture store file or a
JSONL file of calls) and what dedup makes of them.

    gyrectl replay runs/demo                 # trees and per-step dedup statistics
    gyrectl replay calls.jsonl --json        # {"totals": {...}, "executions": [...]}
    gyrectl replay calls.seg                 # what `python -m gyrectl.gateway --records calls.seg` wrote
    gyrectl replay runs/demo --step 3 --export step3.jsonl
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.text import Text
from rich.tree import Tree

from gyrectl.capture.source import Recorded, load
from gyrectl.capture.stored import full_records
from gyrectl.cli.options import JsonOpt
from gyrectl.cli.render import emit_json, err, out, skipped_text, table
from gyrectl.dedup.report import ExecutionReport, ReplayReport, replay_report
from gyrectl.store.jsonl import JsonlAppender

MAX_SEGMENTS_SHOWN = 200


def replay(
    source: Annotated[Path, typer.Argument(help="Run directory, capture store file (.seg) or JSONL file of "
                                                "recorded calls.", show_default=False)],
    step: Annotated[int | None, typer.Option(help="Only the executions this training step consumed.")] = None,
    execution: Annotated[str | None, typer.Option(help="Only this execution.")] = None,
    j_max: Annotated[int, typer.Option(help="Paths per execution for the paths-mode statistics.")] = 4,
    export: Annotated[Path | None, typer.Option(help="Write the selected calls as JSONL (replay's input "
                                                     "format).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Show trajectory trees and dedup statistics of a run, a capture store file or a JSONL file of calls.

    Each tree shows role, branch kind, tokens, trainable tokens, reward and weight versions; the
    statistics compare naive tokens (every call on its own) with unique tokens and the tokens
    each dedup mode trains.

    Examples:

      gyrectl replay runs/tiny --step 3

      gyrectl replay calls.jsonl --json | jq .totals

      gyrectl replay calls.seg --json   (a gateway's --records file: calls only, no steps or rewards)

      gyrectl replay runs/tiny --execution task7-0 --export task7.jsonl
    """
    recorded = load(source)
    report = replay_report(recorded, step=step, execution=execution, j_max=j_max)
    _say_what_was_lost(recorded)
    if export is not None:
        _export(recorded, report, export)
        err.print(escape(f"wrote {sum(e.counts.calls for e in report.executions)} calls to {export}"),
                  highlight=False, soft_wrap=True)
    if json_:
        emit_json(report.to_json())
        return
    for e in report.executions:
        out.print(_tree_view(e))
    out.print(_stats_table(report))


def _say_what_was_lost(recorded: Recorded) -> None:
    """On stderr, so ``--json`` stays data only (the same facts are in its ``skipped`` and
    ``unrecoverable_calls``)."""
    if recorded.skipped:
        err.print(skipped_text(recorded.skipped, read=f"{sum(map(len, recorded.calls.values()))} call(s)"),
                  soft_wrap=True)
    if recorded.unrecoverable:
        lost = ", ".join(f"{e} ({n})" for e, n in sorted(recorded.unrecoverable.items()))
        err.print(Text(f"{sum(recorded.unrecoverable.values())} intact call(s) extend a damaged record and "
                       f"cannot be rebuilt: {lost}", style="yellow"), soft_wrap=True)


def _export(recorded: Recorded, report: ReplayReport, path: Path) -> None:
    with JsonlAppender(path, fsync=False) as appender:
        for e in report.executions:
            extra = {k: v for k, v in (("step", e.info.step), ("reward", e.info.reward)) if v is not None}
            for record in full_records(recorded.calls[e.execution]):
                appender.append({**record.to_json(), **extra})


def _tree_view(e: ExecutionReport) -> Tree:
    tree, c = e.tree, e.counts
    reward = "" if e.info.reward is None else f" · reward {e.info.reward:g}"
    step = "" if e.info.step is None else f" · step {e.info.step}"
    root = Tree(f"[bold]{escape(e.execution)}[/]{step}{reward} · {c.calls} calls · {c.naive_tokens} naive → "
                f"{c.unique_tokens} unique tokens ({c.dedup_ratio:.1f}x) · {c.paths} paths")
    nodes: dict[int, Tree] = {}
    trainable = tree.segment_sums(tree.trainable.astype(int))
    for s in range(min(len(tree.seg_start), MAX_SEGMENTS_SHOWN)):
        call = int(tree.seg_call[s])
        label, meta = tree.labels[call], tree.calls[call].meta
        versions = sorted({int(v) for v in tree.weight_version[tree.seg_start[s]:tree.seg_end[s]] if v >= 0})
        text = (f"{meta.role} · {label.kind}{' (re-rendered)' if label.rerendered else ''} · "
                f"{tree.seg_end[s] - tree.seg_start[s]} tok, {int(trainable[s])} trainable"
                + (f" · v{','.join(map(str, versions))}" if versions else ""))
        parent = nodes.get(int(tree.seg_parent[s]), root)
        nodes[s] = parent.add(text)
    if len(tree.seg_start) > MAX_SEGMENTS_SHOWN:
        root.add(f"... {len(tree.seg_start) - MAX_SEGMENTS_SHOWN} more segments (use --json for counts)")
    return root


def _stats_table(report: ReplayReport):
    columns = ["step", "executions", "calls", "naive tokens", "unique tokens", "ratio",
               "trained (exact)", "computed (paths)", "trained (paths)"]
    rows = [[("-" if step is None else step), c.executions, c.calls, c.naive_tokens, c.unique_tokens,
             f"{c.dedup_ratio:.2f}x", c.trained_tokens_exact, c.computed_tokens_paths, c.trained_tokens_paths]
            for step, c in [*report.by_step().items(), ("all", report.totals)]]
    return table("dedup per step", columns, rows)

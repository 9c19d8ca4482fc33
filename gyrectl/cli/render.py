"""Every command prints through here: data as JSON on stdout (``--json``), people-facing tables and
messages via rich, logs and errors on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gyrectl.store.damage import Skipped

out = Console()
err = Console(stderr=True)


def emit_json(data: Any) -> None:
    """Only data on stdout, one JSON document, nothing else."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, whole: Sequence[str] = ()) -> Table:
    """``rows`` under ``columns``, as data (never markup). The columns named in ``whole`` are never
    wrapped or cut (names a reader looks for, like config keys); the others then fold, a long word
    broken rather than cut, to make room for them on a narrow terminal."""
    t = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
    for column in columns:
        t.add_column(column, no_wrap=column in whole, overflow="fold" if whole and column not in whole else "ellipsis")
    for row in rows:
        t.add_row(*(Text("" if v is None else str(v)) for v in row))  # data, never markup
    return t


def skipped_text(skipped: Sequence[Skipped], *, read: str, most: int = 5) -> Text:
    """What a reader skipped, and what it read instead (``read``: "12 record(s) of journal.jsonl"),
    as plain text: paths are shown as they are, never as markup."""
    lines = [f"skipped {len(skipped)} unreadable span(s); read {read}"]
    lines += [f"  {span.describe()}" for span in skipped[:most]]
    if len(skipped) > most:
        lines.append(f"  ... {len(skipped) - most} more (--json lists them all)")
    return Text("\n".join(lines), style="yellow")

"""``gyrectl config docs`` at 80 columns, piped (as its help suggests: ``| grep scheduler``) and on
a terminal: every key whole, where its row starts; nothing cut."""

from __future__ import annotations

import json
import re

import pytest


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_config_docs_at_80_columns_shows_every_key_whole(cli, terminal: bool) -> None:
    keys = [row["key"] for row in json.loads(cli("config", "docs", "--json").stdout)]
    # FORCE_COLOR makes rich take the pipe for a terminal (and colour it: the codes are removed)
    result = cli("config", "docs", env={"COLUMNS": "80", "FORCE_COLOR": "1" if terminal else ""})
    assert result.returncode == 0, result.stderr
    lines = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout).splitlines()
    first_words = [line.split()[0] for line in lines if line.strip()]
    assert [word for word in first_words if word in keys] == keys
    assert "…" not in result.stdout
    if terminal:
        assert max(map(len, lines)) <= 80
    else:  # one line per field, so a grep shows the whole field
        assert len(lines) == len(keys)

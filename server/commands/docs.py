"""docs/commands.md, generated from the command table (CONTRIBUTING.md, *One command table*).

Run ``python -m server.commands.docs > docs/commands.md`` after changing a row.

A test regenerates the text and compares it with the file, so the reference can never drift from what the
server dispatches.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from server.commands.spec import CommandSpec

HEADER = """# Commands reference

Generated from the command table (`server/commands/table.py`) by `python -m server.commands.docs`;
do not edit by hand. Every command not listed here is relayed to the backing Redis unchanged.
Details, replies and error texts: [tensors](commands-tensors.md), [models](commands-models.md),
[scripts](commands-scripts.md), [DAGs and batching](commands-dag.md),
[AI.INFO / AI.CONFIG](commands-info-config.md).

Arity follows Redis: `n` = exactly n words with the command name, `-n` = at least n. AI commands take
any arity here and check it themselves, with RedisAI's texts. The keys column is the command's key specs
(`COMMAND INFO`, Redis 7's shape): `arg 1` the first argument, `INPUTS n key…` a count and that many keys
after the word, `(…)` keys only the command's own parser can find (`COMMAND GETKEYS` uses it).

`COMMAND` merges these rows into the store's list (ours replace the store's entry of the same name, so
`COMMAND COUNT` is the length of `COMMAND`). `COMMAND INFO` shows Redis 7's key specs;
`COMMAND GETKEYS AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c` answers `m a b c` (a DAG: its LOAD, PERSIST,
KEYS and ROUTING keys, then each op's model or script key), and `GETKEYSANDFLAGS` the spec's flags.
`COMMAND DOCS` gives the AI commands' arguments (from the usage lines) and complexity, in group `module`,
module `ai`, and the store's own documentation for the Redis commands. `COMMAND LIST FILTERBY
MODULE ai | ACLCAT ai | PATTERN ai.model*` filters ours as the store filters its own.
"""

GROUP_TITLES = {"ai": "AI commands", "connection": "Connection", "keyspace": "Keyspace", "server": "Server"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(spec: CommandSpec) -> str:
    keys = "; ".join(key_spec.brief() for key_spec in spec.specs()) or "-"
    flags = ", ".join(spec.flags) or "-"
    return f"| `{spec.name}` | `{_cell(spec.usage)}` | {_cell(spec.summary)} | {spec.arity} | {flags} | {keys} |"


def render(table: Mapping[str, CommandSpec]) -> str:
    parts = [HEADER]
    for group, title in GROUP_TITLES.items():
        specs = sorted((s for s in table.values() if s.group == group), key=lambda s: s.name)
        if not specs:
            continue
        parts.append(f"\n## {title}\n\n| command | usage | what it does | arity | flags | keys |\n"
                     "|---|---|---|---|---|---|\n")
        parts.append("\n".join(_row(spec) for spec in specs) + "\n")
    return "".join(parts)


def main() -> None:
    from server.commands.table import COMMAND_TABLE

    sys.stdout.write(render(COMMAND_TABLE))


if __name__ == "__main__":
    main()

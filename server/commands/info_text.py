"""INFO text, pure: which sections a request names, the store's text cut into sections, our fields merged in.

Redis 7's section groups (``default``, ``all``, ``everything``) decide what INFO shows. The store answers
every section it has; the server's own ``server``, ``clients`` and ``stats`` fields replace the store's
fields of the same name (our process id, port, uptime, connections, commands) and the rest of the store's
fields stay, so a client reading ``used_memory``, ``rdb_last_save_time`` or ``instantaneous_ops_per_sec``
finds them as on any Redis. The module list shows RedisAI's module, ``ai``, as RedisAI's Redis does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

Fields = list[tuple[str, object]]

# RedisAI 1.2.7 as a module: name "ai", version major*10000 + minor*100 + patch (REDISAI_MODULE_VERSION).
MODULE_NAME = "ai"
MODULE_VERSION = 10207
MODULE_LINE = f"module:name={MODULE_NAME},ver={MODULE_VERSION},api=1,filters=0,usedby=[],using=[],options=[]"

DEFAULT_SECTIONS = ("server", "clients", "memory", "persistence", "stats", "replication", "cpu", "module_list",
                    "errorstats", "cluster", "keyspace")
GROUPS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "default": DEFAULT_SECTIONS,
    "all": (*DEFAULT_SECTIONS, "commandstats", "latencystats"),
    "everything": (*DEFAULT_SECTIONS, "commandstats", "latencystats", "modules"),
})
# Redis 7's order of its sections (server.c genRedisInfoString), whatever order a request names them in.
ORDER = ("server", "clients", "memory", "persistence", "stats", "replication", "cpu", "module_list", "commandstats",
         "errorstats", "latencystats", "cluster", "keyspace")
# Our sections; "module_list" and "modules" are titled "# Modules" (modules adds the modules' own sections).
_TITLES: Mapping[str, str] = MappingProxyType({"module_list": "modules"})


def wanted_sections(words: Sequence[str]) -> list[str]:
    """The sections INFO ``words`` asks for, each once, in Redis 7's order whatever the order asked
    (``ORDER``; sections we do not know keep the order asked), the modules' own sections last: ``ai`` for all
    of them, or the ``ai_*`` sections named. ``modules`` is the module list and the modules' sections."""
    names = [word.lower() for word in words] or ["default"]
    asked = list(dict.fromkeys(section for name in names for section in GROUPS.get(name, (name,))))
    if "modules" in asked:
        asked = [s for s in asked if s != "modules"] + ["module_list", "ai"]
    known = [section for section in ORDER if section in asked]
    others = [s for s in dict.fromkeys(asked) if s not in ORDER and s != "ai" and not s.startswith("ai_")]
    ai = ["ai"] if "ai" in asked else [s for s in dict.fromkeys(asked) if s.startswith("ai_")]
    return known + others + ai


def split_sections(text: str) -> dict[str, list[str]]:
    """The store's INFO text as {lower-case title: its field lines}."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.split("\r\n"):
        if line.startswith("# "):
            current = sections.setdefault(line[2:].strip().lower(), [])
        elif line and current is not None:
            current.append(line)
    return sections


def merged(store_lines: Sequence[str], ours: Fields) -> list[str]:
    """The store's fields with ours in place of the same-named ones, then our other fields."""
    values = {key: value for key, value in ours}
    out = []
    for line in store_lines:
        key = line.split(":", 1)[0]
        out.append(f"{key}:{values.pop(key)}" if key in values else line)
    return out + [f"{key}:{value}" for key, value in ours if key in values]


def module_lines(store_lines: Sequence[str]) -> list[str]:
    """``# Modules``: the ``ai`` module first, then any module the store itself has loaded."""
    return [MODULE_LINE, *(line for line in store_lines if line.startswith("module:"))]


def render(title: str, lines: Sequence[str]) -> str:
    return f"# {title}\r\n" + "".join(f"{line}\r\n" for line in lines)


def title_of(section: str) -> str:
    """Redis's spelling of a section title: ``Server``, ``CPU``, ``Modules``, ``Errorstats``."""
    name = _TITLES.get(section, section)
    return name.upper() if name == "cpu" else name.capitalize()


def store_key(section: str) -> str:
    """The key of ``section`` in ``split_sections`` of the store's text."""
    return _TITLES.get(section, section)

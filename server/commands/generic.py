"""Connection-level commands we answer ourselves: AUTH, HELLO, PING, ECHO, QUIT, SELECT, RESET, CLIENT.

Everything else that is not an AI command goes to the backing store verbatim (``RELAY``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

from backends import errors as msgs
from backends.errors import AIError, wrong_arity
from backends.objects import GRAPH_MARKER, MARKER_FIELD, MODEL_MARKER, SCRIPT_MARKER
from backends.tensor import HEADER_SIZE, looks_like_tensor
from server.commands.context import DATABASES, REDIS_COMPAT_VERSION, VERSION
from server.commands.spec import RELAY, RelayThen
from server.protocol.reply import OK, PONG, Status, Verbatim
from server.protocol.request import parse_strict_int
from server.store.keyspace import status_text

if TYPE_CHECKING:
    from server.commands.context import Client


def cmd_ping(client: Client, argv: list[bytes]) -> Any:
    """PING [message]"""
    if client.relays_everything():
        return RELAY
    if len(argv) > 2:
        raise wrong_arity(argv[0].decode(errors="replace"))
    return argv[1] if len(argv) == 2 else PONG


def cmd_echo(client: Client, argv: list[bytes]) -> Any:
    """ECHO message"""
    return RELAY if client.relays_everything() else argv[1]


def cmd_quit(client: Client, argv: list[bytes]) -> Any:
    """QUIT: answer +OK, then close once every earlier reply is written."""
    client.close_after_reply()
    return OK


def cmd_auth(client: Client, argv: list[bytes]) -> Any:
    """AUTH [username] password"""
    if len(argv) > 3:
        raise AIError(msgs.SYNTAX_MSG)
    password = client.ctx.config.requirepass
    if not password and len(argv) == 2:
        raise AIError(msgs.AUTH_NOT_CONFIGURED_MSG)
    user = argv[1] if len(argv) == 3 else b"default"
    if user != b"default" or (password and argv[-1].decode(errors="replace") != password):
        raise AIError(msgs.WRONGPASS_MSG)  # with no password set, Redis's default user takes any (AUTH default x)
    client.state.authenticated = True
    return OK


def cmd_hello(client: Client, argv: list[bytes]) -> Any:
    """HELLO [protover [AUTH username password] [SETNAME clientname]]"""
    proto = client.state.proto
    if len(argv) > 1:
        value = parse_strict_int(argv[1])
        if value is None:
            raise AIError(msgs.INVALID_PROTOVER_MSG)
        if value not in (2, 3):
            raise AIError(msgs.NOPROTO_MSG)
        proto = value
    name, index = None, 2
    while index < len(argv):
        option, left = argv[index].upper(), len(argv) - index - 1
        if option == b"AUTH" and left >= 2:
            cmd_auth(client, [b"AUTH", argv[index + 1], argv[index + 2]])
            index += 3
        elif option == b"SETNAME" and left >= 1:
            name = _valid_client_name(argv[index + 1])
            index += 2
        else:
            raise AIError(msgs.HELLO_OPTION_SYNTAX_FMT.format(option=argv[index].decode(errors="replace")))
    if not client.state.authenticated:
        raise AIError(msgs.HELLO_NOAUTH_MSG)
    if name is not None:
        client.state.name = name
    client.set_protocol(proto)
    version = client.ctx.store_version.redis_version or REDIS_COMPAT_VERSION  # the store's, as INFO server says
    return {"server": "redis", "version": version, "proto": proto, "id": client.state.id,
            "mode": "standalone", "role": "master",
            "modules": [{"name": "ai", "ver": 10207, "path": "builtin", "args": []}],
            "redisai_server": VERSION}


def cmd_select(client: Client, argv: list[bytes]) -> Any:
    """SELECT index: validated here, then relayed so the client's own store connection switches too."""
    index = parse_strict_int(argv[1])
    if index is None:
        raise AIError(msgs.NOT_INTEGER_MSG)
    if not 0 <= index < DATABASES:
        raise AIError(msgs.DB_INDEX_MSG)
    state, previous = client.state, client.state.db
    state.db = index  # at once: what is pipelined behind it goes to the new database, as on the store side

    def undo_if_refused(raw: bytes) -> bytes:
        if raw[:1] == b"-":  # the store refused it (e.g. unreachable): the client is still where it was
            state.db = previous
        return raw

    return RelayThen(undo_if_refused)


def cmd_reset(client: Client, argv: list[bytes]) -> Any:
    """RESET: back to a fresh connection — RESP2, the default db, no name, no MULTI/WATCH/subscriptions
    (the store session is dropped and reopened on demand), and not authenticated when a password is set."""
    client.reset()
    state = client.state
    state.db = client.ctx.store.default_db
    state.name = ""
    state.in_multi = state.used_pubsub = state.tracking = False
    state.pending_db = None
    if state.reply_mode == "off":  # RESET answers after CLIENT REPLY OFF, which it clears; right after a SKIP,
        client.show_current_reply(True)  # it is the skipped command (Redis keeps that flag): no reply
    state.reply_mode = "on"
    state.proto = 2
    state.authenticated = not client.ctx.config.requirepass
    return Status("RESET")


async def cmd_type(client: Client, argv: list[bytes]) -> Any:
    """TYPE key: RedisAI's type names for AI values (AI_TENSOR, AI__MODEL, AI_SCRIPT; ours: AI_GRAPH), the
    store's otherwise.

    Tensors are Redis strings and models/scripts Redis hashes here; TYPE tells them apart as RedisAI's
    module types did, so clients that branch on it keep working.
    """
    key = argv[1]
    kind, prefix, marker = await client.keyspace().pipeline(
        [(b"TYPE", key), (b"GETRANGE", key, b"0", str(HEADER_SIZE - 1).encode()), (b"HGET", key, MARKER_FIELD)])
    if isinstance(kind, AIError):
        raise kind
    name = status_text(kind)
    if name == "string" and isinstance(prefix, bytes) and looks_like_tensor(prefix):
        return Status("AI_TENSOR")
    if name == "hash" and marker in _AI_HASH_TYPES:
        return Status(_AI_HASH_TYPES[marker])
    return Status(name)


_AI_HASH_TYPES: Final = {MODEL_MARKER: "AI__MODEL", SCRIPT_MARKER: "AI_SCRIPT", GRAPH_MARKER: "AI_GRAPH"}


def _valid_client_name(name: bytes) -> str:
    if any(c <= 32 or c >= 127 for c in name):
        raise AIError(msgs.CLIENT_NAME_SPACES_MSG)
    return name.decode()


def cmd_client(client: Client, argv: list[bytes]) -> Any:
    """CLIENT SETNAME|GETNAME|SETINFO|ID|INFO|LIST|KILL|PAUSE|UNPAUSE ... (others are relayed to the store)."""
    sub = argv[1].upper()
    handler = _CLIENT_SUBCOMMANDS.get(sub)
    if handler is None:
        return RELAY
    return handler(client, argv)


def _client_setname(client: Client, argv: list[bytes]) -> Any:
    if len(argv) != 3:
        raise wrong_arity("client|setname")
    client.state.name = _valid_client_name(argv[2]) if argv[2] else ""
    return OK


def _client_getname(client: Client, argv: list[bytes]) -> Any:
    if len(argv) != 2:
        raise wrong_arity("client|getname")
    return client.state.name.encode() if client.state.name else None


def _client_setinfo(client: Client, argv: list[bytes]) -> Any:
    if len(argv) != 4:
        raise wrong_arity("client|setinfo")
    attr = argv[2].upper()
    if attr not in (b"LIB-NAME", b"LIB-VER"):
        raise AIError(msgs.UNRECOGNIZED_OPTION_FMT.format(option=argv[2].decode(errors="replace")))
    if any(c < 33 or c > 126 for c in argv[3]):
        raise AIError(msgs.CLIENT_SETINFO_CHARS_FMT.format(attr=attr.decode().lower()))
    if attr == b"LIB-NAME":
        client.state.lib_name = argv[3].decode()
    else:
        client.state.lib_ver = argv[3].decode()
    return OK


def _client_id(client: Client, argv: list[bytes]) -> Any:
    if len(argv) != 2:
        raise wrong_arity("client|id")
    return client.state.id


def _client_info(client: Client, argv: list[bytes]) -> Any:
    """CLIENT INFO: this client's CLIENT LIST line (RESP3: a verbatim string, as Redis answers)."""
    return _listing(client, client.describe() + "\n")


def _client_list(client: Client, argv: list[bytes]) -> Any:
    """CLIENT LIST [TYPE normal|pubsub|...] [ID id ...]"""
    clients = list(client.ctx.clients.values())
    if len(argv) >= 4 and argv[2].upper() == b"ID":
        wanted = {parse_strict_int(a) for a in argv[3:]}
        if None in wanted:
            raise AIError(msgs.NOT_INTEGER_MSG)
        clients = [c for c in clients if c.state.id in wanted]
    elif len(argv) == 4 and argv[2].upper() == b"TYPE":
        clients = _of_type(clients, argv[3])
    elif len(argv) != 2:
        raise AIError(msgs.SYNTAX_MSG)
    return _listing(client, "".join(c.describe() + "\n" for c in clients))


def _listing(client: Client, text: str) -> Any:
    return Verbatim(text.encode()) if client.state.proto == 3 else text.encode()


def _of_type(clients: list[Client], kind: bytes) -> list[Client]:
    """CLIENT LIST / CLIENT KILL's ``TYPE normal|pubsub|master|replica|slave``: ours are normal or pubsub."""
    wanted = kind.lower()
    if wanted not in (b"normal", b"pubsub", b"master", b"replica", b"slave"):
        raise AIError(msgs.UNKNOWN_CLIENT_TYPE_FMT.format(kind=kind.decode(errors="replace")))
    return [c for c in clients if (b"pubsub" if c.subscribed() else b"normal") == wanted]


def _client_kill(client: Client, argv: list[bytes]) -> Any:
    """CLIENT KILL addr | CLIENT KILL [ID id] [TYPE type] [USER user] [ADDR addr] [LADDR addr] [SKIPME yes|no] ..."""
    if len(argv) == 3:
        victims = [c for c in client.ctx.clients.values() if c.state.addr == argv[2].decode(errors="replace")]
        if not victims:
            raise AIError(msgs.NO_SUCH_CLIENT_MSG)
        victims[0].kill()
        return OK
    if len(argv) % 2 != 0 or len(argv) < 4:
        raise AIError(msgs.SYNTAX_MSG)
    victims = _select_victims(client, argv[2:])
    for victim in victims:
        victim.kill()
    return len(victims)


def _select_victims(client: Client, filters: list[bytes]) -> list[Client]:
    candidates = list(client.ctx.clients.values())
    skip_me = True
    for name, value in zip(filters[::2], filters[1::2], strict=False):
        key, text = name.upper(), value.decode(errors="replace")
        if key == b"ID":
            wanted = parse_strict_int(value)
            if wanted is None or wanted <= 0:
                raise AIError(msgs.CLIENT_ID_POSITIVE_MSG)
            candidates = [c for c in candidates if c.state.id == wanted]
        elif key == b"ADDR":
            candidates = [c for c in candidates if c.state.addr == text]
        elif key == b"LADDR":
            candidates = [c for c in candidates if c.state.laddr == text]
        elif key == b"USER":
            if text != "default":  # the one user there is
                raise AIError(msgs.NO_SUCH_USER_FMT.format(user=text))
        elif key == b"TYPE":
            candidates = _of_type(candidates, value)
        elif key == b"SKIPME":
            if value.lower() not in (b"yes", b"no"):
                raise AIError(msgs.SYNTAX_MSG)
            skip_me = value.lower() == b"yes"
        else:
            raise AIError(msgs.SYNTAX_MSG)
    return [c for c in candidates if not (skip_me and c is client)]


def _client_reply(client: Client, argv: list[bytes]) -> Any:
    """CLIENT REPLY ON|OFF|SKIP, kept here: the store keeps answering, our slots drop what was turned off."""
    if len(argv) != 3:
        raise wrong_arity("client|reply")
    mode = argv[2].lower()
    if mode not in (b"on", b"off", b"skip"):
        raise AIError(msgs.SYNTAX_MSG)
    if mode == b"skip" and client.state.reply_mode == "off":
        return OK  # as Redis: SKIP while replies are off is ignored (they stay off), and this reply is dropped
    client.state.reply_mode = mode.decode()
    client.show_current_reply(mode == b"on")
    return OK


def _client_refused(client: Client, argv: list[bytes]) -> Any:
    """Subcommands that name client ids: ours are not the store's, so they cannot be relayed safely."""
    raise AIError(msgs.CLIENT_SUBCOMMAND_UNSUPPORTED_FMT.format(sub=argv[1].decode(errors="replace").upper()))


def _client_tracking(client: Client, argv: list[bytes]) -> Any:
    """CLIENT TRACKING ON|OFF [options]: relayed (the store tracks the client's session); what the store accepted
    is noted for CLIENT LIST's flag t. REDIRECT is refused: our client ids are not the store's."""
    if any(arg.upper() == b"REDIRECT" for arg in argv[2:]):
        raise AIError(msgs.CLIENT_TRACKING_REDIRECT_MSG)
    if len(argv) < 3:
        return RELAY  # the store's arity error
    turned_on = argv[2].upper() == b"ON"

    def noted(raw: bytes) -> bytes:
        if raw == b"+OK\r\n":
            client.state.tracking = turned_on
        return raw

    return RelayThen(noted)


def _client_pause(client: Client, argv: list[bytes]) -> Any:
    """CLIENT PAUSE timeout [WRITE | ALL]: relayed. A WRITE pause blocks writes only, but a paused write on the
    shared relay would hold every client's reads behind it, so until the pause ends session-less clients use
    sessions of their own (server/frontend/relay.py)."""
    timeout = parse_strict_int(argv[2]) if len(argv) > 2 else None
    if timeout is not None and timeout >= 0 and len(argv) > 3 and argv[3].upper() == b"WRITE":
        client.ctx.shared_relay_paused_until = time.monotonic() + timeout / 1000
    return RELAY


def _client_unpause(client: Client, argv: list[bytes]) -> Any:
    client.ctx.shared_relay_paused_until = 0.0
    return RELAY


_CLIENT_SUBCOMMANDS: Final = {
    b"PAUSE": _client_pause,
    b"UNPAUSE": _client_unpause,
    b"REPLY": _client_reply,
    b"UNBLOCK": _client_refused,
    b"TRACKING": _client_tracking,
    b"SETNAME": _client_setname,
    b"GETNAME": _client_getname,
    b"SETINFO": _client_setinfo,
    b"ID": _client_id,
    b"INFO": _client_info,
    b"LIST": _client_list,
    b"KILL": _client_kill,
}


def uptime_seconds(started_at: float) -> int:
    return int(time.time() - started_at)

"""One error root for every layer, and the catalogue of exact reply texts.

Clients match on these strings (RedisAI 1.2.7 and Redis wording), so every message lives here, once.
Only the connection turns an error into a ``-...`` RESP line.
"""

from __future__ import annotations


class AIError(Exception):
    """An error that is answered to the client as ``-<message>``.

    ``message`` is the whole raw text after the ``-`` (it carries its own ``ERR``/``WRONGTYPE`` prefix, or none,
    exactly as RedisAI sends it).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def resp_text(self) -> str:
        """The text on the wire: CR and LF become spaces, as RedisAI's one-line errors do."""
        return self.message.replace("\r", " ").replace("\n", " ")


class ProtocolError(AIError):
    """A malformed or over-limit request: answered, then the connection is closed."""


def wrong_arity(command_as_typed: str) -> AIError:
    """Redis's generic arity error, echoing the command name exactly as the client typed it."""
    return AIError(f"ERR wrong number of arguments for '{command_as_typed}' command")


def unknown_command(name: str, args: list[str]) -> AIError:
    """Redis 7's unknown-command error, with the first arguments quoted as Redis does."""
    quoted = "".join(f"'{a}' " for a in args[:20])
    return AIError(f"ERR unknown command '{name}', with args beginning with: {quoted}")


# --- generic server messages (Redis wording) ---------------------------------------------------------------------
NOAUTH_MSG = "NOAUTH Authentication required."
HELLO_NOAUTH_MSG = (
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> "
    "<pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
)
WRONGPASS_MSG = "WRONGPASS invalid username-password pair or user is disabled."
AUTH_NOT_CONFIGURED_MSG = (
    "ERR AUTH <password> called without any password configured for the default user. "
    "Are you sure your configuration is correct?"
)
SYNTAX_MSG = "ERR syntax error"
NOPROTO_MSG = "NOPROTO unsupported protocol version"
INVALID_PROTOVER_MSG = "ERR Protocol version is not an integer or out of range"
NOT_INTEGER_MSG = "ERR value is not an integer or out of range"
DB_INDEX_MSG = "ERR DB index is out of range"
CLIENT_NAME_SPACES_MSG = "ERR Client names cannot contain spaces, newlines or special characters."
NO_SUCH_CLIENT_MSG = "ERR No such client"
UNKNOWN_SUBCOMMAND_FMT = "ERR unknown subcommand '{sub}'. Try {cmd} HELP."
INVALID_COMMAND_GETKEYS_MSG = "ERR Invalid command specified"
NO_KEYS_MSG = "ERR The command has no key arguments"
INVALID_ARGS_GETKEYS_MSG = "ERR Invalid arguments specified for command"
SHUTTING_DOWN_MSG = "ERR Server is shutting down"
UPSTREAM_DOWN_MSG = "ERR backing store unavailable: {detail}"
INTERNAL_MSG = "ERR internal error: {detail}"
PUBSUB_CONTEXT_FMT = (
    "ERR Can't execute '{cmd}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET "
    "are allowed in this context"
)

# --- RESP protocol errors (Redis wording, connection is closed afterwards) --------------------------------------
PROTO_INVALID_MULTIBULK_MSG = "ERR Protocol error: invalid multibulk length"
PROTO_INVALID_BULK_MSG = "ERR Protocol error: invalid bulk length"
PROTO_EXPECTED_DOLLAR_FMT = "ERR Protocol error: expected '$', got '{got}'"
PROTO_BIG_INLINE_MSG = "ERR Protocol error: too big inline request"
PROTO_BIG_MBULK_MSG = "ERR Protocol error: too big mbulk count string"
PROTO_BIG_BULK_COUNT_MSG = "ERR Protocol error: too big bulk count string"
PROTO_UNBALANCED_QUOTES_MSG = "ERR Protocol error: unbalanced quotes in request"
PROTO_QUERYBUF_MSG = "ERR Protocol error: query buffer limit exceeded"

# --- RedisAI messages (REDISAI-REFERENCE.md §7 and Appendix A) ---------------------------------------------------
WRONGTYPE_MSG = "WRONGTYPE Operation against a key holding the wrong kind of value"

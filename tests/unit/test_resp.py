"""The RESP codec without sockets: split reads at every byte boundary, encodings, limits."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from typing import Any, cast

import hiredis
import pytest

from backends.errors import AIError, ProtocolError
from server.commands.client_state import ClientState
from server.frontend.replies import ReplyQueue
from server.protocol.big_bulk import BigBulk
from server.protocol.framer import ReplyFramer
from server.protocol.reply import NULL_ARRAY, OK, PONG, Push, RawParts, Status, Verbatim, encode, vectored
from server.protocol.request import (
    BIG_BULK,
    HEAD_WINDOW,
    Limits,
    RequestParser,
    parse_strict_int,
    split_inline_args,
)
from server.store.atomic import BIG_VALUE_AT, big_tensor_write
from server.store.upstream import pack_command, pack_parted

STREAM = (
    b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$12\r\nhello\r\nworld\r\n"
    b"PING\r\n"
    b"*1\r\n$4\r\nPING\r\n"
    b"set a \"x y\\n\" 'z'\r\n"
    b"*0\r\n"
    b"\r\n"
    b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n"
)
EXPECTED = [
    [b"SET", b"key", b"hello\r\nworld"],
    [b"PING"],
    [b"PING"],
    [b"set", b"a", b"x y\n", b"z"],
    [b"ECHO", b""],
]


def _parse_all(parser: RequestParser) -> list[list[bytes]]:
    out = []
    while (cmd := parser.next_command()) is not None:
        out.append(cmd)
    return out


def test_parses_a_stream_in_one_read() -> None:
    parser = RequestParser()
    parser.feed(STREAM)
    assert _parse_all(parser) == EXPECTED


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_split_at_every_byte_boundary(cut: int) -> None:
    parser = RequestParser()
    parser.feed(STREAM[:cut])
    got = _parse_all(parser)
    parser.feed(STREAM[cut:])
    got += _parse_all(parser)
    assert got == EXPECTED


def test_byte_by_byte() -> None:
    parser = RequestParser()
    got = []
    for i in range(len(STREAM)):
        parser.feed(STREAM[i : i + 1])
        got += _parse_all(parser)
    assert got == EXPECTED


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"*x\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*-\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*2147483648\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*1\r\n$-1\r\n", "ERR Protocol error: invalid bulk length"),
        (b"*1\r\n$01\r\n", "ERR Protocol error: invalid bulk length"),
        (b"*1\r\nfoo\r\n", "ERR Protocol error: expected '$', got 'f'"),
        (b"GET \"abc\r\n", "ERR Protocol error: unbalanced quotes in request"),
        (b"GET 'abc\r\n", "ERR Protocol error: unbalanced quotes in request"),
        (b"GET \"a\"b\r\n", "ERR Protocol error: unbalanced quotes in request"),
    ],
)
def test_protocol_errors(data: bytes, message: str) -> None:
    parser = RequestParser()
    parser.feed(data)
    with pytest.raises(ProtocolError) as info:
        _parse_all(parser)
    assert info.value.message == message


def test_limits() -> None:
    limits = Limits(max_bulk_len=10, max_multibulk_len=3, inline_max_size=16, query_buffer_limit=64)
    cases = [
        (b"*4\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*1\r\n$11\r\n", "ERR Protocol error: invalid bulk length"),
        (b"x" * 20, "ERR Protocol error: too big inline request"),
        (b"*" + b"1" * 20, "ERR Protocol error: too big mbulk count string"),
        (b"*1\r\n$" + b"1" * 20, "ERR Protocol error: too big bulk count string"),
    ]
    for data, message in cases:
        parser = RequestParser(limits)
        parser.feed(data)
        with pytest.raises(ProtocolError, match=message.replace("(", r"\(")):
            _parse_all(parser)
    parser = RequestParser(limits)
    with pytest.raises(ProtocolError, match="query buffer limit"):
        parser.feed(b"*1\r\n$10\r\n" + b"x" * 80)


def test_large_bulk_arrives_in_pieces() -> None:
    payload = bytes(range(256)) * 4096
    data = b"*2\r\n$3\r\nSET\r\n$%d\r\n%s\r\n" % (len(payload), payload)
    parser = RequestParser()
    for start in range(0, len(data), 65536):
        parser.feed(data[start : start + 65536])
        if start + 65536 < len(data):
            assert parser.next_command() is None
    assert parser.next_command() == [b"SET", payload]


@pytest.mark.parametrize("piece", [1_000, 65_536, 100_003, 300_000])
def test_a_big_bulk_between_commands_keeps_its_first_part_while_the_buffer_takes_more(piece: int) -> None:
    """The first part of a big bulk is copied to its place, and the parser reads on into a new buffer: neither
    the commands around it nor the bytes after it change the value."""
    payload = random.Random(piece).randbytes(200_000)
    data = (b"*1\r\n$4\r\nPING\r\n" + pack_command([b"SET", b"k", payload])
            + b"*2\r\n$4\r\nECHO\r\n$3\r\nend\r\n" + pack_command([b"SET", b"k2", payload[::-1]]))
    parser = RequestParser()
    got = []
    for start in range(0, len(data), piece):
        parser.feed(data[start : start + piece])
        got += _parse_all(parser)
    assert got == [[b"PING"], [b"SET", b"k", payload], [b"ECHO", b"end"], [b"SET", b"k2", payload[::-1]]]


@pytest.mark.parametrize("piece", [1, 7, 65_536, 150_001])
def test_a_big_bulk_read_into_its_place_equals_one_fed(piece: int) -> None:
    """The reads of a big bulk land in ``big_free()``'s view, at most ``piece`` bytes at a time, as the event loop
    fills it (server/frontend/bulk_reader.py); the rest is fed. The value is whole, and neither the command
    before it nor the ones after it change."""
    payload = random.Random(piece).randbytes(300_000)
    data = (b"*1\r\n$4\r\nPING\r\n" + pack_command([b"AI.TENSORSET", b"t", b"UINT8", b"300000", b"BLOB", payload])
            + b"*2\r\n$4\r\nECHO\r\n$3\r\nend\r\n")
    parser = RequestParser()
    got: list[list[bytes]] = []
    at, in_place = 0, 0
    while at < len(data):
        view = parser.big_free()
        if view is None:
            parser.feed(data[at : at + 20_000])  # a first read: the bulk's announcement and a part of it
            at += 20_000
            got += _parse_all(parser)
            continue
        count = min(piece, len(view), len(data) - at)
        view[:count] = data[at : at + count]
        view.release()
        parser.big_received(count)
        at += count
        in_place += count
    assert got == [[b"PING"], [b"AI.TENSORSET", b"t", b"UINT8", b"300000", b"BLOB", payload], [b"ECHO", b"end"]]
    assert type(got[1][-1]) is bytes
    assert in_place == len(payload) - (20_000 - data.index(payload))


@pytest.mark.parametrize("piece", [7, 11, 1_000, HEAD_WINDOW, HEAD_WINDOW + 1, 70_000, 10**6])
def test_headers_and_small_bulks_read_from_the_copied_window_give_the_same_commands(piece: int) -> None:
    """The Python parser reads bulk headers and small bulks from a copy of the next ``HEAD_WINDOW`` bytes: bulks
    and headers that end inside it, at its edge and past it, a bulk larger than it, data holding '$' and CR LF,
    and a header that is not all there when a read ends give the commands they encode, in any chunking. Each
    command carries a big bulk, so that the buffer is too big for hiredis and every byte goes through here."""
    rng = random.Random(piece)
    big = rng.randbytes(BIG_BULK + 5)
    sizes = [0, 1, 9, HEAD_WINDOW - 30, HEAD_WINDOW - 13, HEAD_WINDOW - 12, HEAD_WINDOW, HEAD_WINDOW + 1,
             3 * HEAD_WINDOW, 99, 1_000]
    commands = []
    for shift in range(4):  # each command starts at another offset of the window
        small = [b"$\r\n" * (size // 3) + rng.randbytes(size % 3) for size in sizes[shift:]]
        commands.append([b"SET" + b"x" * shift, *small, big, *small[:3]])
    for size in range(HEAD_WINDOW - 40, HEAD_WINDOW + 4):  # a bulk, then a header, ending at each byte near the edge
        commands.append([b"SET", rng.randbytes(size), b"v" * 12, big])
    data = b"".join(pack_command(command) for command in commands)
    parser = RequestParser()
    got: list[list[bytes]] = []
    for start in range(0, len(data), piece):
        parser.feed(data[start : start + piece])
        got += _parse_all(parser)
    assert got == commands


@pytest.mark.parametrize(("header", "message"), [
    (b"$01\r\n", "invalid bulk length"), (b"$-1\r\n", "invalid bulk length"), (b"$+5\r\n", "invalid bulk length"),
    (b"$5 \r\n", "invalid bulk length"), (b"$1000000000\r\n", "invalid bulk length"),
    (b"$" + b"9" * 30 + b"\r\n", "invalid bulk length"), (b"$\r\n", "invalid bulk length"),
])
def test_a_header_the_window_does_not_read_gets_redis_s_error(header: bytes, message: str) -> None:
    """After a big bulk's command has made the parser Python's, a header that is not plain digits gets the
    error Redis gives."""
    parser = RequestParser()
    parser.feed(b"*3\r\n$3\r\nSET\r\n$" + str(BIG_BULK).encode() + b"\r\n" + bytes(BIG_BULK) + b"\r\n" + header)
    with pytest.raises(ProtocolError, match=message):
        _parse_all(parser)


def test_a_big_bulk_is_handed_out_as_the_bytes_object_its_reads_filled() -> None:
    """No copy once complete: the value is the very object filled (asked twice, the same object), and it holds
    what was read into it, in order."""
    payload = random.Random(5).randbytes(100_000)
    bulk = BigBulk(payload[:1000], len(payload))
    while not bulk.complete():
        view = bulk.free()
        count = min(30_000, len(view))
        view[:count] = payload[bulk.filled : bulk.filled + count]
        view.release()  # what the event loop does once it has reported the read
        bulk.received(count)
    value = bulk.value()
    assert value == payload and type(value) is bytes
    assert bulk.value() is value


def test_a_view_still_referenced_when_the_bulk_completes_is_let_go_so_the_value_is_not_copied() -> None:
    """The last view handed out for a read may still be referenced (no longer held for a read) when the value is
    taken: it is released, so the BytesIO has no export left and hands out its bytes object itself (asked
    twice, the same object; with an export left, each ``getvalue`` is a new copy)."""
    payload = random.Random(6).randbytes(100_000)
    bulk = BigBulk(payload[:1000], len(payload))
    view = bulk.free()
    view[:] = payload[1000:]
    bulk.received(len(view))
    value = bulk.value()
    assert value == payload and bulk.value() is value
    with pytest.raises(ValueError):  # released
        view[0]


def test_no_big_bulk_no_place_to_read_into() -> None:
    parser = RequestParser()
    parser.feed(b"*2\r\n$3\r\nGET\r\n$70000\r\n")
    assert parser.next_command() is None
    view = parser.big_free()
    assert view is not None and len(view) == 70_000
    view.release()
    parser.big_received(70_000)
    assert parser.big_free() is None
    parser.feed(b"\r\n")
    assert parser.next_command() == [b"GET", bytes(70_000)]


def test_inline_args_like_redis() -> None:
    assert split_inline_args(b'  set  "a\\x41\\tb"   \'c d\' ') == [b"set", b"aA\tb", b"c d"]
    assert split_inline_args(b"") == []
    assert split_inline_args(b'""') == [b""]


def test_strict_int() -> None:
    assert parse_strict_int(b"0") == 0
    assert parse_strict_int(b"-12") == -12
    for bad in (b"", b"-", b"+1", b"01", b" 1", b"1.0", b"-0", b"9223372036854775808"):
        assert parse_strict_int(bad) is None


@pytest.mark.parametrize(
    ("value", "resp2", "resp3"),
    [
        (Status("OK"), b"+OK\r\n", b"+OK\r\n"),
        (OK, b"+OK\r\n", b"+OK\r\n"),
        (PONG, b"+PONG\r\n", b"+PONG\r\n"),
        (Status("QUEUED"), b"+QUEUED\r\n", b"+QUEUED\r\n"),
        (-3, b":-3\r\n", b":-3\r\n"),
        (1023, b":1023\r\n", b":1023\r\n"),
        (1024, b":1024\r\n", b":1024\r\n"),
        (b"x" * 1023, b"$1023\r\n" + b"x" * 1023 + b"\r\n", b"$1023\r\n" + b"x" * 1023 + b"\r\n"),
        (b"x" * 1024, b"$1024\r\n" + b"x" * 1024 + b"\r\n", b"$1024\r\n" + b"x" * 1024 + b"\r\n"),
        ([0] * 63, b"*63\r\n" + b":0\r\n" * 63, b"*63\r\n" + b":0\r\n" * 63),
        ([0] * 64, b"*64\r\n" + b":0\r\n" * 64, b"*64\r\n" + b":0\r\n" * 64),
        (b"ab", b"$2\r\nab\r\n", b"$2\r\nab\r\n"),
        ("é", b"$2\r\n\xc3\xa9\r\n", b"$2\r\n\xc3\xa9\r\n"),
        (7, b":7\r\n", b":7\r\n"),
        (None, b"$-1\r\n", b"_\r\n"),
        (NULL_ARRAY, b"*-1\r\n", b"_\r\n"),
        (True, b":1\r\n", b"#t\r\n"),
        (1.5, b"$3\r\n1.5\r\n", b",1.5\r\n"),
        (0.1, b"$19\r\n0.10000000000000001\r\n", b",0.10000000000000001\r\n"),
        (float("inf"), b"$3\r\ninf\r\n", b",inf\r\n"),
        ([1, b"x"], b"*2\r\n:1\r\n$1\r\nx\r\n", b"*2\r\n:1\r\n$1\r\nx\r\n"),
        ({b"k": 1}, b"*2\r\n$1\r\nk\r\n:1\r\n", b"%1\r\n$1\r\nk\r\n:1\r\n"),
        ({b"m"}, b"*1\r\n$1\r\nm\r\n", b"~1\r\n$1\r\nm\r\n"),
        (Push([b"message"]), b"*1\r\n$7\r\nmessage\r\n", b">1\r\n$7\r\nmessage\r\n"),
        (Verbatim(b"a:1"), b"$3\r\na:1\r\n", b"=7\r\ntxt:a:1\r\n"),
        (AIError("ERR bad\r\nthing"), b"-ERR bad  thing\r\n", b"-ERR bad  thing\r\n"),
    ],
)
def test_encode(value: object, resp2: bytes, resp3: bytes) -> None:
    assert encode(value, 2) == resp2
    assert encode(value, 3) == resp3


REPLIES = [
    b"+OK\r\n",
    b"-ERR x\r\n",
    b":12\r\n",
    b"$5\r\nab\r\nc\r\n",
    b"$-1\r\n",
    b"*-1\r\n",
    b"*0\r\n",
    b"*2\r\n*2\r\n:1\r\n$1\r\na\r\n%1\r\n+k\r\n~1\r\n,1.5\r\n",
    b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nd\r\n",
    b"|1\r\n+key\r\n+val\r\n:5\r\n",
    b"=7\r\ntxt:abc\r\n",
    b"_\r\n",
    b"#t\r\n",
]


@pytest.mark.parametrize("cut", range(1, len(b"".join(REPLIES))))
def test_framer_split_at_every_boundary(cut: int) -> None:
    stream = b"".join(REPLIES)
    framer = ReplyFramer()
    frames = []
    for part in (stream[:cut], stream[cut:]):
        framer.feed(part)
        while (frame := framer.next_frame()) is not None:
            frames.append(frame)
    assert frames == REPLIES


def _encode_request(argv: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


def test_the_hiredis_fast_path_and_the_python_parser_agree_on_any_chunking() -> None:
    """Random pipelines of multibulk commands (some inline, some empty frames), fed in random chunks: every
    command comes out once, in order, whichever parser took it (server/protocol/request.py, fast path)."""
    rng = random.Random(7)
    for _ in range(200):
        commands = [[rng.randbytes(rng.choice([0, 1, 5, 300, 70_000])) for _ in range(rng.randint(1, 5))]
                    for _ in range(rng.randint(1, 12))]
        wire = bytearray()
        for argv in commands:
            wire += b"*0\r\n" if rng.random() < 0.1 else b""
            wire += _encode_request(argv)
        parser, offset = RequestParser(), 0
        got: list[list[bytes]] = []
        while offset < len(wire):
            step = rng.choice([1, 7, 100, 5000, 200_000])
            parser.feed(bytes(wire[offset : offset + step]))
            offset += step
            while (command := parser.next_command()) is not None:
                got.append(command)
        assert got == commands
        assert parser.buffered() == 0


def test_a_bad_frame_after_good_ones_still_gets_redis_s_exact_error() -> None:
    parser = RequestParser()
    parser.feed(_encode_request([b"SET", b"k", b"v"]) + _encode_request([b"GET", b"k"]) + b"*1\r\n$03\r\nGET\r\n")
    assert parser.next_command() == [b"SET", b"k", b"v"]
    assert parser.next_command() == [b"GET", b"k"]
    with pytest.raises(ProtocolError, match=r"^ERR Protocol error: invalid bulk length$"):
        parser.next_command()


def test_non_bulk_elements_are_left_to_the_python_parser() -> None:
    parser = RequestParser()
    parser.feed(_encode_request([b"PING"]) + b"*1\r\n:5\r\n")
    assert parser.next_command() == [b"PING"]
    with pytest.raises(ProtocolError, match=r"^ERR Protocol error: expected '\$', got ':'$"):
        parser.next_command()


@pytest.mark.parametrize(("frame", "error"), [
    (b"*1\r\n+PING\r\n", "ERR Protocol error: expected '$', got '+'"),
    (b"*1\r\n(123\r\n", "ERR Protocol error: expected '$', got '('"),
    (b"*1\r\n=8\r\ntxt:abcd\r\n", "ERR Protocol error: expected '$', got '='"),
])
def test_resp3_scalars_inside_a_request_are_refused_as_redis_refuses_them(frame: bytes, error: str) -> None:
    parser = RequestParser()
    parser.feed(_encode_request([b"PING"]) + frame + _encode_request([b"ECHO", b"x"]))
    assert parser.next_command() == [b"PING"]
    with pytest.raises(ProtocolError) as info:
        parser.next_command()
    assert info.value.message == error


def test_a_set_or_push_frame_after_a_command_is_not_taken_for_a_multibulk() -> None:
    parser = RequestParser()
    parser.feed(_encode_request([b"PING"]) + b"~1\r\n$4\r\nPING\r\n")
    assert parser.next_command() == [b"PING"]
    assert parser.next_command() == [b"~1"]  # Redis reads a line that does not start with '*' as inline


def test_the_fast_path_honours_custom_limits() -> None:
    parser = RequestParser(Limits(max_bulk_len=3))
    parser.feed(_encode_request([b"GET", b"toolong"]))
    with pytest.raises(ProtocolError, match=r"invalid bulk length"):
        parser.next_command()


@pytest.mark.parametrize("sizes", [[], [0], [3], [1023, 1024], [5, 0, 1024, 70_000, 1], [2] * 70])
def test_store_commands_are_packed_as_hiredis_packs_them(sizes: list[int]) -> None:
    """server/store/upstream.py pack_command: small and large arguments, empty ones, more than 63 of them."""
    argv = [bytes([65 + i % 26]) * size for i, size in enumerate(sizes)]
    assert pack_command(argv) == cast(Any, hiredis).pack_command(tuple(argv))  # (its stub types a 1-tuple)
    reader = hiredis.Reader()
    reader.feed(pack_command(argv))
    assert reader.gets() == argv


def test_an_argument_sent_in_parts_is_the_one_bulk_of_its_joined_value_and_its_data_is_not_copied() -> None:
    """server/store/upstream.py pack_parted: the commands' RESP as if the argument were its parts joined, the
    data its own buffer (the very object, no copy), the small parts around it joined."""
    head, data = b"H" * 40, memoryview(bytes(range(256)) * 300)
    commands = [[b"MULTI"], [b"EVALSHA", b"0" * 40, b"1", b"k", b"0"], [b"SET", b"k", b"", b"NX"], [b"EXEC"]]
    buffers = pack_parted(commands, (2, 2), (head, data))
    joined = [list(argv) for argv in commands]
    joined[2][2] = head + bytes(data)
    assert b"".join(buffers) == b"".join(pack_command(argv) for argv in joined)
    assert len(buffers) == 3 and buffers[1] is data
    reader = hiredis.Reader()
    reader.feed(b"".join(buffers))
    assert [reader.gets() for _ in joined] == joined
    with pytest.raises(ValueError, match="no argument"):  # never the placeholder in its place
        pack_parted(commands, (2, 4), (head, data))
    value = b"v" * 10
    written = big_tensor_write(b"k", value, False)  # where the keyspace puts a big tensor's parts
    assert written[BIG_VALUE_AT[0]][BIG_VALUE_AT[1]] is value and written[BIG_VALUE_AT[0]][0] == b"SET"


def test_a_big_bulk_reply_is_its_own_buffer_and_the_queue_keeps_the_order() -> None:
    """server/protocol/reply.py ``vectored`` and ReplyQueue.ready: a bulk of BIG_REPLY_PART bytes or more is
    left as it is (the very object), smaller ones are encoded and joined as before."""
    big = memoryview(bytes(range(256)) * 256)  # 64 KiB
    assert vectored(big) == [b"$65536\r\n", big, b"\r\n"] and vectored(big)[1] is big
    assert vectored(bytes(big)) is not None and vectored(big[:-1]) is None and vectored(b"small") is None
    parts = RawParts([b"*1\r\n$65536\r\n", big, b"\r\n"])
    assert vectored(parts) == parts.parts and encode(parts) == b"*1\r\n" + encode(big)
    queue = ReplyQueue()
    state = ClientState(1, "127.0.0.1:5000", "127.0.0.1:6379", 7, True)
    first, second, third = queue.open(state), queue.open(state), queue.open(state)
    second.fill_parts(vectored(big) or [])
    assert queue.ready() == b""  # the head is unanswered: nothing leaves
    first.fill(b"+PONG\r\n")
    third.fill(b":1\r\n")
    out = queue.ready()
    assert isinstance(out, list) and out[2] is big
    assert b"".join(out) == b"+PONG\r\n" + encode(big) + b":1\r\n" and not queue
    skipped = queue.open(state)
    skipped.suppressed = True
    skipped.fill_parts(vectored(big) or [])
    assert queue.ready() == b""


ANNOUNCED_HUGE = textwrap.dedent("""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # 1 GiB of address space, this process only
    from backends.errors import ProtocolError
    from server.protocol.request import RequestParser
    for data in (b"*2147483647\\r\\n", b"*1\\r\\n*2147483647\\r\\n", b"*2\\r\\n$1\\r\\na\\r\\n*100000000\\r\\n",
                 b"*4000000000\\r\\n"):
        parser = RequestParser()
        parser.feed(data)
        try:
            print(repr(parser.next_command()))
        except ProtocolError as exc:
            print(exc.message)
        except MemoryError:
            print("MemoryError")
""")


def test_a_request_announcing_billions_of_arguments_allocates_nothing_for_them() -> None:
    """hiredis makes a list of an array's announced size as it reads the header: ``*2147483647`` (15 bytes)
    took 16 GB of address space and seconds of the loop thread to free, a nested one likewise, and
    ``*4000000000`` raised MemoryError. Only complete plain frames reach it now; the rest is Redis's answer
    (wait for the arguments, or the Protocol error). Run with 1 GiB of address space, where such a list fails."""
    done = subprocess.run([sys.executable, "-c", ANNOUNCED_HUGE], capture_output=True, text=True, timeout=120,
                          check=True)
    assert done.stdout.splitlines() == [
        "None",  # a valid count (Redis's limit is INT_MAX): the arguments are awaited
        "ERR Protocol error: expected '$', got '*'",
        "ERR Protocol error: expected '$', got '*'",
        "ERR Protocol error: invalid multibulk length",
    ]


@pytest.mark.parametrize("frames", [
    [b"PING"], [b"SET", b"k", b"v" * 300], [b"GET", b""], [b"AI.TENSORSET", b"t", b"FLOAT", b"2", b"BLOB", b"\r\n*9"],
])
def test_the_fast_path_takes_plain_frames_and_leaves_the_rest_from_where_it_starts(frames: list[bytes]) -> None:
    """Several complete frames, then a partial one and a non-canonical one: each complete frame once, in order."""
    parser = RequestParser()
    parser.feed(pack_command(frames) * 3 + b"*2\r\n$3\r\nGET\r\n$01\r\nk\r\n")
    assert [parser.next_command() for _ in range(3)] == [frames] * 3
    with pytest.raises(ProtocolError):
        parser.next_command()


def test_a_non_ascii_byte_in_a_protocol_error_goes_out_as_that_byte() -> None:
    """redis-server 7 echoes the offending byte raw (b"got '\\xff'"), not as its UTF-8 encoding."""
    parser = RequestParser()
    parser.feed(b"*1\r\n\xff\r\n")
    with pytest.raises(ProtocolError) as raised:
        parser.next_command()
    assert encode(raised.value, 2) == b"-ERR Protocol error: expected '$', got '\xff'\r\n"

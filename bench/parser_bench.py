"""The request parser alone on commands with big arguments, the part hiredis leaves to Python: CPU µs a command.

Usage: python -m bench.parser_bench [--repeat N]      (run it from another checkout, compiled there, to compare)

Each command is fed in 64 KiB pieces to a fresh ``RequestParser`` (server/protocol/request.py), as plain reads
would bring it, and parsed; the best of five rounds of ``--repeat`` commands is printed, in this process's CPU
time. No sockets and no event loop: what moves between two trees here is the parser's own work, the big
argument's making included.
"""

from __future__ import annotations

import argparse
import random
import time

from bench.common import print_table
from server.compiled import describe_build
from server.protocol.request import RequestParser
from server.store.upstream import pack_command

READ: int = 64 * 1024
ROUNDS: int = 5


def commands() -> dict[str, bytes]:
    rng = random.Random(1)
    image = rng.randbytes(602_112)
    return {
        "AI.TENSORSET 602 KB": pack_command([b"AI.TENSORSET", b"t", b"FLOAT", b"1", b"3", b"224", b"224", b"BLOB",
                                             image]),
        "8 x 8 KiB + 100 KB": pack_command([b"CMD", *(rng.randbytes(8192) for _ in range(8)), rng.randbytes(100_000)]),
        "40 x 2 KiB + 100 KB": pack_command([b"CMD", *(rng.randbytes(2048) for _ in range(40)),
                                             rng.randbytes(100_000)]),
    }


def parse_us(data: bytes, repeat: int) -> float:
    """The best round's CPU µs to parse ``data`` once."""
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(repeat):
            parser = RequestParser()
            for at in range(0, len(data), READ):
                parser.feed(data[at : at + READ])
                while parser.next_command() is not None:
                    pass
        best = min(best, (time.process_time() - started) / repeat * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=300, help="commands parsed per round")
    repeat = parser.parse_args().repeat
    rows = [[name, f"{parse_us(data, repeat):.1f}"] for name, data in commands().items()]
    print_table(f"RequestParser, 64 KiB reads, best of {ROUNDS} rounds ({describe_build()})",
                ["command", "CPU us"], rows)


if __name__ == "__main__":
    main()

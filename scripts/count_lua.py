#!/usr/bin/env python3
"""Instructions the counting server spends on one Lua construct (a closure, a pcall, a C call, a strtod...).

The last rows are what the other scripts of a job's life are made of (docs/performance.md, "The other scripts of
a job's life"): a C call such as ``type``, a number made text, a walk over a record's fields, the record's JSON
read and written, a Redis command.

What a construct costs inside match.lua decides how the script is written (docs/performance.md, "The match's
common path"): each one runs ``--loops`` times in one EVAL on a redis-server under callgrind (the server of
scripts/count_match.py), and the count of a second EVAL, divided by the loops, is printed beside the count of
an empty loop. The arguments are a match call's (a 17-digit time, short numbers). Needs valgrind.
Usage: python scripts/count_lua.py [--loops 2000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from count_match import Counted

#: Each construct, as Lua run in a loop; ``A`` is ARGV, ``F`` a function made before the loop, ``E`` a heads entry.
CONSTRUCTS = {
    "empty loop": "",
    "closure, no upvalue": "local f = function(a) return a end",
    "closure, 4 upvalues": "local f = function() return x1, x2, x3, x4 end",
    "pcall of a new closure": "local ok, a, b = pcall(function(t) return t[3] + 0, t[4] + 0 end, A)",
    "pcall of a made one": "local ok, a, b = pcall(F, A)",
    "7 arguments + 0": "local a, b, c, d, e, f, g = A[3] + 0, A[4] + 0, A[5] + 0, A[6] + 0, A[7] + 0, "
    "A[8] + 0, A[9] + 0",
    "7 arguments tonumber": "local a, b, c, d, e, f, g = tonumber(A[3]), tonumber(A[4]), tonumber(A[5]), "
    "tonumber(A[6]), tonumber(A[7]), tonumber(A[8]), tonumber(A[9])",
    "17-digit time + 0": "local a = A[3] + 0",
    "17-digit time tonumber": "local a = tonumber(A[3])",
    "concatenation": "local s = A[1] .. 'stats'",
    "string.sub": "local s = string.sub(A[1], 1, 5)",
    "plain string.find": "local s = string.find(A[1], 'xx', 1, true)",
    "table": "local t = {}",
    "match, 4 captures": "local a, b, c, d = string.match(E, '^%S+ [^:]+:(%d+):(%d+):(%d+):(%d+) ')",
    "HMGET of 2 fields": "local r = redis.call('HMGET', 'h', 'a', 'b')",
    "HMGET of 3 fields": "local r = redis.call('HMGET', 'h', 'a', 'b', 'c')",
    # what the other scripts of a job's life (submit, start, complete: scripts/count_life.py) are made of
    "type()": "local t = type(A)",
    "tostring of a number": "local s = tostring(i)",
    "pairs over a record": "for k, v in pairs(D) do end",
    "cjson.decode of a record": "local r = cjson.decode(R)",
    "cjson.encode of a record": "local s = cjson.encode(D)",
    "a number as an argument": "local r = redis.call('HSET', 'h2', 'f', i + 0.25)",
    "HSET of one field": "local r = redis.call('HSET', 'h2', 'f', 'v')",
}
PRELUDE = (
    "local A = ARGV local x1, x2, x3, x4 = 1, 2, 3, 4 local F = function(t) return t[3] + 0, t[4] + 0 end "
    "local E = '1764325123.1234567 123:1:2000:0:90 0:0:0:0' "
    # a job's record as submit.lua stores it (count_life's jobs)
    'local R = \'{"sc":"1795874004.7","ts":1795873974.7,"rn":"cm","n":"t0","q":"c68a6ef740ba",'
    '"e":60,"c":"true","mt":":1:0:0:90","pr":60,"t":"c64278960be07246.default.root","s":"waiting"}\' '
    "local D = cjson.decode(R) "
)
ARGS = ["pf:{vo}:", "p1", "1764325123.4567891", "3600", "8", "16000", "0", "6000", "8", "-", "60"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=2000)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (instruction counts do not depend on it)")
    with tempfile.TemporaryDirectory() as tmp:
        server = Counted(Path(tmp))
        try:
            server.client.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
            for name, body in CONSTRUCTS.items():
                script = f"{PRELUDE}for i = 1, {args.loops} do {body} end return 1"
                server.client.eval(script, 0, *ARGS)  # the script compiled and cached: not counted
                server.dump()
                server.client.eval(script, 0, *ARGS)
                print(f"{name:>26} {server.dump() / args.loops:8,.0f} instructions", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()

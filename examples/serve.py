#!/usr/bin/env python3
"""A persistent closure server for `workerloop --serve`, standard library only.

workerloop writes one closure per line of JSON to our stdin:
    {"id": 7, "attempt": 1, "argv": ["echo", "hi"], "env": {...}, "stdin": "<base64>"}
and reads one answer per line from our stdout:
    {"exit": 0, "stdout": "<base64>", "stderr": "<base64>"}

Small closures are answered in this process (no fork, no exec): here `echo`,
`true`, `false` and `sh -c 'exit N'`; anything else runs as a subprocess.
A real server would import its model once and dispatch on argv[0] to its
own functions. Print nothing else on stdout: it is the protocol's.
"""
import base64
import json
import os
import re
import subprocess
import sys


def answer(code, out=b"", err=b""):
    line = {"exit": code}
    if out:
        line["stdout"] = base64.b64encode(out).decode()
    if err:
        line["stderr"] = base64.b64encode(err).decode()
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def run(req):
    argv = req["argv"]
    if argv[0] == "echo":
        return answer(0, (" ".join(argv[1:]) + "\n").encode())
    if argv[0] == "true":
        return answer(0)
    if argv[0] == "false":
        return answer(1)
    if argv[:2] == ["sh", "-c"] and len(argv) == 3:
        m = re.fullmatch(r"exit (\d+)", argv[2].strip())
        if m:
            return answer(int(m.group(1)))
    env = dict(os.environ)
    env.update(req.get("env", {}))
    data = base64.b64decode(req["stdin"]) if "stdin" in req else b""
    try:
        p = subprocess.run(argv, input=data, capture_output=True, env=env)
    except OSError as e:
        return answer(127, err=str(e).encode())
    code = p.returncode if p.returncode >= 0 else 128 - p.returncode
    answer(code, p.stdout, p.stderr[-4096:])


def main():
    for line in sys.stdin:
        if line.strip():
            run(json.loads(line))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""A real SMTP server for the jobscope cluster tests (Debian's python3-aiosmtpd, installed by
slurm-conf/install-deps.sh). Every accepted message is stored as it came off the wire:

    OUTDIR/<ms>-<n>.eml    the DATA bytes, unchanged (CRLF line ends, dot-unstuffed)
    OUTDIR/<ms>-<n>.json   {"mail_from", "rcpt_tos", "helo", "peer", "received_unix_ms"}

The .json is written first and the .eml last, each atomically (temp file + rename), so a reader
that sees an .eml sees the whole message and its envelope.

usage: /usr/bin/python3 sink.py OUTDIR HOST PORT
Prints "ready <host>:<port>" on stdout once it accepts connections. Stops on SIGTERM/SIGINT, and
also by itself when its parent process goes away (a test process that was killed), so it never
outlives the test that started it.
"""
import itertools
import json
import os
import signal
import sys
import threading
import time

from aiosmtpd.controller import Controller


class Store:
    def __init__(self, out):
        self.out = out
        self.counter = itertools.count(1)
        self.lock = threading.Lock()

    def _write(self, name, data):
        tmp = os.path.join(self.out, "." + name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, os.path.join(self.out, name))

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            n = next(self.counter)
        now = int(time.time() * 1000)
        base = f"{now:013d}-{n:05d}"
        meta = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": list(envelope.rcpt_tos),
            "helo": session.host_name,
            "peer": list(session.peer) if session.peer else None,
            "received_unix_ms": now,
        }
        self._write(base + ".json", json.dumps(meta).encode())
        self._write(base + ".eml", envelope.original_content)
        return "250 OK stored as " + base


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    out, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.makedirs(out, exist_ok=True)
    parent = os.getppid()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    controller = Controller(Store(out), hostname=host, port=port)
    try:
        controller.start()
    except Exception as e:  # port in use, ...
        print(f"sink: cannot listen on {host}:{port}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    print(f"ready {host}:{port}", flush=True)
    while not stop.wait(0.2):
        if os.getppid() != parent:
            break
    controller.stop()


if __name__ == "__main__":
    main()

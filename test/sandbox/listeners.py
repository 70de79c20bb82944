#!/usr/bin/env python3
"""listeners.py: the host-side targets of soda's sandbox tests.

Runs on the host (in the test box) while sandboxes try to reach it:

  --echo PORT        TCP echo server on 127.0.0.1:PORT (a granted target)
  --tcp PORT         TCP server on 127.0.0.1:PORT that answers "host\n"
                     (a host service the sandbox must NOT reach)
  --any PORT         the same on 0.0.0.0:PORT, reachable through every
                     address of the host (a public one included)
  --unix PATH        listening pathname Unix socket (repeatable)
  --abstract NAME    listening abstract Unix socket @NAME (repeatable)

Prints "ready" on stdout once everything listens; every accepted
connection is logged on stderr ("HIT <what>") so that a test can assert
that nothing got through. Runs until killed.
"""
import argparse
import os
import socket
import sys
import threading


def serve(sock, what, echo):
    while True:
        conn, _ = sock.accept()
        print(f"HIT {what}", file=sys.stderr, flush=True)

        def handle(c):
            try:
                if echo:
                    while True:
                        data = c.recv(65536)
                        if not data:
                            break
                        c.sendall(data)
                else:
                    c.sendall(b"host\n")
            finally:
                c.close()

        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--echo", type=int)
    p.add_argument("--tcp", type=int)
    p.add_argument("--any", type=int)
    p.add_argument("--unix", action="append", default=[])
    p.add_argument("--abstract", action="append", default=[])
    a = p.parse_args()
    socks = []
    for port, echo, addr in ((a.echo, True, "127.0.0.1"), (a.tcp, False, "127.0.0.1"), (a.any, False, "0.0.0.0")):
        if port:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
            s.listen(64)
            socks.append((s, f"tcp:{port}", echo))
    for path in a.unix:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        os.chmod(path, 0o666)
        s.listen(16)
        socks.append((s, f"unix:{path}", False))
    for name in a.abstract:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\0" + name)
        s.listen(16)
        socks.append((s, f"abstract:{name}", False))
    for s, what, echo in socks:
        threading.Thread(target=serve, args=(s, what, echo), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()

"""A real neighbour for the accuracy benchmark: --procs processes that keep a core each busy with
arithmetic until killed (SIGTERM or SIGKILL), as another tenant's job on a shared node would."""
import argparse
import multiprocessing
import os
import signal
import sys


def spin():
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    x = 0
    while True:
        for i in range(10_000):
            x = (x + i * i) % 1_000_003


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=2)
    args = p.parse_args()
    workers = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.procs)]
    for w in workers:
        w.start()

    def stop(*_):
        for w in workers:
            w.kill()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print(" ".join(str(w.pid) for w in workers), flush=True)
    for w in workers:
        w.join()


if __name__ == "__main__":
    os.setpgrp()
    main()

"""What the link between two local nodes carries, run inside a node's namespace by bench_train.py.

    link_probe.py recv PORT BYTES            accept one TCP stream, read BYTES, print {"bytes", "seconds"}
    link_probe.py send HOST PORT BYTES       connect and write BYTES in 4 MB writes
    link_probe.py allreduce MASTER RANK SIZES ROUNDS THREADS
        gloo between 2 ranks: each round all-reduces one fp32 tensor per size in SIZES (bytes,
        comma-separated), launched together as DDP launches its buckets, and waits for all; prints
        {"bytes", "seconds"} over the rounds after the first. THREADS: gloo's worker threads.

The receiver times from the first byte to the last, so connection set-up is left out.
"""
from __future__ import annotations

import json
import socket
import sys
import time

CHUNK = 4 << 20


def recv(port: int, total: int) -> dict[str, float]:
    with socket.create_server(("0.0.0.0", port)) as server:
        conn, _ = server.accept()
        with conn:
            buffer = memoryview(bytearray(CHUNK))
            got = conn.recv_into(buffer)
            start = time.perf_counter()
            while got < total:
                n = conn.recv_into(buffer)
                if not n:
                    break
                got += n
            return {"bytes": got, "seconds": time.perf_counter() - start}


def send(host: str, port: int, total: int) -> dict[str, float]:
    deadline = time.monotonic() + 20
    while True:
        try:
            conn = socket.create_connection((host, port))
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    payload = bytes(CHUNK)
    start = time.perf_counter()
    with conn:
        for offset in range(0, total, CHUNK):
            conn.sendall(payload[: min(CHUNK, total - offset)])
    return {"bytes": total, "seconds": time.perf_counter() - start}


def allreduce(master: str, rank: int, sizes: list[int], rounds: int, threads: int) -> dict[str, float]:
    import datetime
    import os

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.TCPStore(master, 29511, 2, is_master=rank == 0, timeout=datetime.timedelta(seconds=60))
    options = dist.ProcessGroupGloo._Options()
    options._devices = [dist.ProcessGroupGloo.create_device(interface=os.environ.get("GLOO_SOCKET_IFNAME", "eth0"))]
    options._threads = threads
    options._timeout = datetime.timedelta(seconds=60)
    group = dist.ProcessGroupGloo(store, rank, 2, options)
    tensors = [torch.ones(size // 4) for size in sizes]
    seconds = 0.0
    for round_ in range(rounds + 1):
        start = time.perf_counter()
        works = [group.allreduce([tensor]) for tensor in tensors]
        for work in works:
            work.wait()
        if round_:
            seconds += time.perf_counter() - start
    return {"bytes": sum(4 * t.numel() for t in tensors) * rounds, "seconds": seconds}


def main(argv: list[str]) -> None:
    verb = argv[0]
    if verb == "recv":
        result = recv(int(argv[1]), int(argv[2]))
    elif verb == "send":
        result = send(argv[1], int(argv[2]), int(argv[3]))
    elif verb == "allreduce":
        result = allreduce(argv[1], int(argv[2]), [int(s) for s in argv[3].split(",")], int(argv[4]), int(argv[5]))
    else:
        raise SystemExit(__doc__)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])

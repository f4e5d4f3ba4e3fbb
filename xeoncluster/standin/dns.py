"""The VPC resolver (AmazonProvidedDNS at the VPC base + 2): it answers the EC2 private names
ip-A-B-C-D[.ec2.internal] for addresses in the VPC, and NXDOMAIN for anything else at once
(there is no outside world to ask). Intel MPI's proxies find the master by that name."""
from __future__ import annotations

import ipaddress
import re
import socket
import struct
import threading
from dataclasses import dataclass

PRIVATE_NAME = re.compile(r"^ip-(\d+)-(\d+)-(\d+)-(\d+)(\.ec2\.internal|\.[a-z0-9-]+\.compute\.internal)?\.?$")
TYPE_A, CLASS_IN = 1, 1


@dataclass(frozen=True)
class Query:
    id: int
    flags: int
    name: str
    qtype: int
    question: bytes  # the raw question section, echoed in the reply


def parse_query(packet: bytes) -> Query:
    ident, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if qdcount != 1:
        raise ValueError("one question expected")
    labels, pos = [], 12
    while packet[pos]:
        length = packet[pos]
        labels.append(packet[pos + 1:pos + 1 + length].decode("ascii", "replace"))
        pos += 1 + length
    qtype, _ = struct.unpack("!HH", packet[pos + 1:pos + 5])
    return Query(ident, flags, ".".join(labels).lower(), qtype, packet[12:pos + 5])


def resolve(name: str, vpc: ipaddress.IPv4Network) -> str | None:
    match = PRIVATE_NAME.match(name)
    if not match:
        return None
    try:
        address = ipaddress.IPv4Address(".".join(match.group(i) for i in range(1, 5)))
    except ValueError:
        return None
    return str(address) if address in vpc else None


def answer(query: Query, vpc: ipaddress.IPv4Network) -> bytes:
    address = resolve(query.name, vpc)
    rd = query.flags & 0x0100
    # QR, AA, RD copied, RA; RCODE 3 (NXDOMAIN) for names we don't know.
    flags = 0x8000 | 0x0400 | rd | 0x0080 | (0 if address else 3)
    records = b""
    if address and query.qtype == TYPE_A:
        records = b"\xc0\x0c" + struct.pack("!HHIH", TYPE_A, CLASS_IN, 60, 4) + socket.inet_aton(address)
    header = struct.pack("!HHHHHH", query.id, flags, 1, 1 if records else 0, 0, 0)
    return header + query.question + records


def serve_dns(address: str, vpc_cidr: str) -> socket.socket:
    vpc = ipaddress.IPv4Network(vpc_cidr)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, 53))

    def loop() -> None:
        while True:
            try:
                packet, peer = sock.recvfrom(512)
            except OSError:
                return  # closed at shutdown
            try:
                sock.sendto(answer(parse_query(packet), vpc), peer)
            except (ValueError, IndexError, struct.error):
                continue

    threading.Thread(target=loop, daemon=True).start()
    return sock

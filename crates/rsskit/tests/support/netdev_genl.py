#!/usr/bin/env python3
"""An independent reader of the kernel's queue -> NAPI -> IRQ map for the
lab tests: the netdev generic netlink family's queue-get and napi-get dumps
(include/uapi/linux/netdev.h), written from the UAPI with Python's socket
module only, so that `rsskit info` is checked against something that shares
none of its code. Debian 12 has no `ynl`; its python3-pyroute2 (0.7.2) was
not checked for the netdev family and is not used (not installed here).

Usage: netdev_genl.py IFNAME   prints {"ifindex", "queues": [...], "napis": [...]}
or {"unavailable": reason} (exit 0 either way; 1 on anything unexpected).
       netdev_genl.py --qstats IFNAME   prints {"rx_packets": {queue: n}} from
the qstats-get dump (per-queue scope): 7.3's virtio-net counts packets per
queue there only, no longer in `ethtool -S`.
"""
import json
import os
import socket
import struct
import sys

NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 1, 2
NLMSG_ERROR, NLMSG_DONE = 2, 3
F_REQUEST, F_ACK, F_DUMP = 1, 4, 0x300
QUEUE_GET, NAPI_GET, QSTATS_GET = 10, 11, 12
# qstats attrs: ifindex 1, queue-type 2, queue-id 3, scope 4, rx-packets 8
QSTATS_SCOPE_QUEUE = 1
# queue attrs: id, ifindex, type, napi-id; napi attrs: ifindex, id, irq, pid
Q = {1: "id", 2: "ifindex", 3: "type", 4: "napi_id"}
N = {1: "ifindex", 2: "id", 3: "irq", 4: "pid"}


def attrs(b):
    out, i = {}, 0
    while i + 4 <= len(b):
        ln, ty = struct.unpack_from("=HH", b, i)
        if ln < 4:
            raise ValueError("attribute length < 4")
        out[ty & 0x3FFF] = b[i + 4:i + ln]
        i += (ln + 3) & ~3
    return out


def talk(sock, seq, family, flags, cmd, payload):
    body = struct.pack("=BBH", cmd, 1, 0) + payload
    sock.send(struct.pack("=IHHII", 16 + len(body), family, F_REQUEST | flags, seq, 0) + body)
    msgs = []
    while True:
        data = sock.recv(1 << 16)
        i = 0
        while i + 16 <= len(data):
            ln, ty, _, s, _ = struct.unpack_from("=IHHII", data, i)
            if ln < 16:
                raise ValueError("message length < 16")
            body = data[i + 16:i + ln]
            i += (ln + 3) & ~3
            if s != seq:
                continue
            if ty == NLMSG_DONE:
                return msgs, 0
            if ty == NLMSG_ERROR:
                err = struct.unpack_from("=i", body)[0]
                if err or not flags & F_DUMP:
                    return msgs, -err
                continue
            msgs.append((body[0], attrs(body[4:])))
            if not flags & (F_DUMP | F_ACK):
                return msgs, 0


def nla(ty, value):
    b = struct.pack("=HH", 4 + len(value), ty) + value
    return b + b"\0" * (-len(b) % 4)


def uint(v):
    # NLA_UINT: 4 or 8 bytes.
    return struct.unpack("=I" if len(v) == 4 else "=Q", v)[0]


def qstats(sock, fam, ifindex):
    payload = nla(1, struct.pack("=I", ifindex)) + nla(4, struct.pack("=I", QSTATS_SCOPE_QUEUE))
    msgs, err = talk(sock, QSTATS_GET, fam, F_DUMP, QSTATS_GET, payload)
    if err:
        return {"unavailable": f"qstats-get: {os.strerror(err)}"}
    rx = {}
    for c, a in msgs:
        if c == QSTATS_GET and uint(a.get(2, b"\xff\xff\xff\xff")) == 0 and 8 in a:
            rx[uint(a[3])] = uint(a[8])
    return {"rx_packets": rx}


def main():
    want_qstats = sys.argv[1] == "--qstats"
    name = sys.argv[-1]
    ifindex = socket.if_nametoindex(name)
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
    sock.settimeout(5)
    msgs, err = talk(sock, 1, GENL_ID_CTRL, F_ACK, CTRL_CMD_GETFAMILY, nla(CTRL_ATTR_FAMILY_NAME, b"netdev\0"))
    if err:
        print(json.dumps({"unavailable": f"no netdev family ({os.strerror(err)})"}))
        return 0
    fam = struct.unpack("=H", msgs[0][1][CTRL_ATTR_FAMILY_ID][:2])[0]
    if want_qstats:
        print(json.dumps(qstats(sock, fam, ifindex), sort_keys=True))
        return 0
    out = {"ifindex": ifindex}
    for key, cmd, names, ifattr in [("queues", QUEUE_GET, Q, 2), ("napis", NAPI_GET, N, 1)]:
        msgs, err = talk(sock, cmd, fam, F_DUMP, cmd, nla(ifattr, struct.pack("=I", ifindex)))
        if err:
            print(json.dumps({"unavailable": f"{key}: {os.strerror(err)}"}))
            return 0
        rows = []
        for c, a in msgs:
            if c != cmd:
                continue
            row = {names[t]: struct.unpack("=I", v)[0] for t, v in a.items() if t in names and len(v) == 4}
            if key == "queues":
                row["type"] = {0: "rx", 1: "tx"}.get(row.get("type"), row.get("type"))
            rows.append(row)
        out[key] = rows
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

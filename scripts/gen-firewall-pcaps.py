#!/usr/bin/env python3
"""Crafted captures for the firewall tests (crates/rsskit-dataplane/tests/firewall_pcap.rs).

Writes, into crates/rsskit-dataplane/testdata/firewall/ (or the directory given
as the first argument), one NAME.pcap per scenario and NAME.json with:

  rules       the rule file text
  me          the addresses `me` stands for
  workers     worker count to run with
  states_max  global state limit (0: none)
  packets     one entry per frame: {"pass": bool, "why": str} and for
              rewritten frames "out": {"src", "sport", "dst", "dport"}
  counters    {rule number: [packets, bytes]} expected after the replay
              (bytes are IP packet lengths, as ipfw counts them)
  final_states expected states over all workers at the end (after the
              test advances the clock past every timeout and collects)

Requires scapy (pip install scapy). Deterministic: fixed addresses, ports,
sequence numbers and timestamps; re-running gives identical files.
"""

import json
import os
import random
import sys

from scapy.all import ARP, ICMP, IP, TCP, UDP, Ether, Raw, wrpcap  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "crates", "rsskit-dataplane", "testdata", "firewall")

ME = "10.0.0.1"
CLIENT = "192.168.1.10"
MAC_A = "02:00:00:00:00:01"
MAC_B = "02:00:00:00:00:02"


class Scenario:
    def __init__(self, name, rules, workers=2, states_max=0, me=(ME,)):
        self.name = name
        self.rules = rules
        self.workers = workers
        self.states_max = states_max
        self.me = list(me)
        self.frames = []
        self.expect = []
        self.counters = {}
        self.t = 1_000.0  # seconds

    def add(self, pkt, passes, why, rule=None, out=None, dt=0.001):
        """pkt: an IP packet (or a full frame for non-IP). rule: number whose
        counters this packet bumps (None: counted nowhere)."""
        self.t += dt
        frame = pkt if pkt.haslayer(Ether) else Ether(src=MAC_A, dst=MAC_B) / pkt
        frame.time = self.t
        self.frames.append(frame)
        e = {"pass": passes, "why": why}
        if out:
            e["out"] = out
        self.expect.append(e)
        if rule is not None:
            c = self.counters.setdefault(str(rule), [0, 0])
            c[0] += 1
            c[1] += len(bytes(frame[IP]))

    def write(self, final_states=0, extra=None):
        os.makedirs(OUT, exist_ok=True)
        wrpcap(os.path.join(OUT, self.name + ".pcap"), self.frames)
        doc = {
            "rules": self.rules,
            "me": self.me,
            "workers": self.workers,
            "states_max": self.states_max,
            "packets": self.expect,
            "counters": self.counters,
            "final_states": final_states,
        }
        if extra:
            doc.update(extra)
        with open(os.path.join(OUT, self.name + ".json"), "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")


def tcp(src, sport, dst, dport, flags, seq=1000, ack=0, payload=b""):
    p = IP(src=src, dst=dst, ttl=64, id=1) / TCP(sport=sport, dport=dport, flags=flags, seq=seq, ack=ack, window=65535)
    if payload:
        p = p / Raw(payload)
    return p


def udp(src, sport, dst, dport, payload=b"q"):
    return IP(src=src, dst=dst, ttl=64, id=1) / UDP(sport=sport, dport=dport) / Raw(payload)


def handshake(s, c, cp, srv, sp, rule, client_out=None, server_out=None, why="flow"):
    """A full short TCP exchange; every packet passes and counts on `rule`."""
    s.add(tcp(c, cp, srv, sp, "S", 100), True, why + " SYN", rule, client_out)
    s.add(tcp(srv, sp, c, cp, "SA", 500, 101), True, why + " SYN-ACK (reply, by state)", rule, server_out)
    s.add(tcp(c, cp, srv, sp, "A", 101, 501), True, why + " ACK", rule, client_out)
    s.add(tcp(c, cp, srv, sp, "PA", 101, 501, b"GET / HTTP/1.0\r\n\r\n"), True, why + " request", rule, client_out)
    s.add(tcp(srv, sp, c, cp, "PA", 501, 119, b"HTTP/1.0 200 OK\r\n\r\nhi"), True, why + " response", rule, server_out)
    s.add(tcp(c, cp, srv, sp, "FA", 119, 523), True, why + " client FIN", rule, client_out)
    s.add(tcp(srv, sp, c, cp, "FA", 523, 120), True, why + " server FIN", rule, server_out)
    s.add(tcp(c, cp, srv, sp, "A", 120, 524), True, why + " last ACK", rule, client_out)


def basic():
    rules = (
        "# the DragonFly paper's example, plus UDP\n"
        "check-state\n"
        "allow tcp from any to me 80 setup keep-state\n"
        "allow udp from any to me 53 keep-state\n"
    )
    s = Scenario("basic", rules)
    handshake(s, CLIENT, 40000, ME, 80, 200, why="tcp 80")
    handshake(s, "192.168.1.11", 40001, ME, 80, 200, why="tcp 80 second client")
    s.add(tcp("192.168.1.12", 40002, ME, 80, "A", 5, 5), False, "ACK without state (setup needed)", 65535)
    s.add(tcp("192.168.1.12", 40003, ME, 22, "S"), False, "SYN to a closed port", 65535)
    s.add(tcp(ME, 80, "192.168.1.13", 40004, "SA", 1, 1), False, "SYN-ACK without state", 65535)
    s.add(tcp(ME, 1234, "192.168.1.13", 80, "S"), False, "outgoing SYN (not to me)", 65535)
    s.add(udp(CLIENT, 5353, ME, 53), True, "udp query", 300)
    s.add(udp(ME, 53, CLIENT, 5353, b"answer"), True, "udp answer (reply, by state)", 300)
    s.add(udp(CLIENT, 5353, ME, 53), True, "udp second query", 300)
    s.add(udp(ME, 53, "192.168.1.99", 5353), False, "udp reply without state", 65535)
    s.add(udp(CLIENT, 5353, ME, 54), False, "udp to another port", 65535)
    s.add(IP(src=CLIENT, dst=ME) / ICMP(), False, "icmp echo", 65535)
    s.add(Ether(src=MAC_A, dst="ff:ff:ff:ff:ff:ff") / ARP(psrc=CLIENT, pdst=ME), True, "ARP is not IP")
    s.write(final_states=0)


def deny_first():
    rules = (
        "10 deny tcp from 192.168.1.66 to any\n"
        "20 allow tcp from any to me 80 setup keep-state\n"
        "30 deny ip from any to any\n"
        "default allow\n"
    )
    s = Scenario("deny", rules, workers=1)
    s.add(tcp("192.168.1.66", 1000, ME, 80, "S"), False, "blacklisted source", 10)
    handshake(s, CLIENT, 40000, ME, 80, 20, why="allowed")
    s.add(udp(CLIENT, 1, ME, 2), False, "explicit deny all", 30)
    s.write(final_states=0)


def limit():
    rules = (
        "check-state\n"
        "allow tcp from any to me 80 setup limit src-addr 3\n"
    )
    s = Scenario("limit", rules)
    for i in range(3):
        s.add(tcp(CLIENT, 41000 + i, ME, 80, "S"), True, f"limit: state {i + 1} of 3", 200)
    s.add(tcp(CLIENT, 41003, ME, 80, "S"), False, "limit: 4th state refused", 200)
    s.add(tcp(CLIENT, 41004, ME, 80, "S"), False, "limit: 5th state refused", 200)
    s.add(tcp("192.168.1.20", 41000, ME, 80, "S"), True, "other source has its own track", 200)
    s.add(tcp(ME, 80, CLIENT, 41000, "SA", 1, 1), True, "reply of a limited flow", 200)
    # RST closes the first flow; 1 s closed lifetime; a new state fits again.
    s.add(tcp(CLIENT, 41000, ME, 80, "R", 2), True, "RST on a tracked flow", 200)
    s.add(tcp(CLIENT, 41005, ME, 80, "S"), True, "after the RST expired: room again", 200, dt=1.5)
    s.add(tcp(CLIENT, 41006, ME, 80, "S"), False, "at the limit again", 200)
    s.write(final_states=0)


def redirect(name="redirect", then="allow tcp from any to 10.0.0.2 80\n", passes=True):
    rules = (
        "check-state\n"
        "redirect tcp 10.0.0.1:8080 -> 10.0.0.2:80\n"
        + then
    )
    s = Scenario(name, rules)
    c_out = {"src": CLIENT, "sport": 40000, "dst": "10.0.0.2", "dport": 80}
    s_out = {"src": ME, "sport": 8080, "dst": CLIENT, "dport": 40000}
    if passes:
        # Redirect rule counts the client's packets (master hits) and the
        # server's (slave hits); the first packet also counts on rule 300
        # (rule processing continues after the translation).
        s.add(tcp(CLIENT, 40000, ME, 8080, "S", 100), True, "first SYN: master + slave installed", 200, c_out)
        s.counters.setdefault("300", [0, 0])
        s.counters["300"][0] += 1
        s.counters["300"][1] += s.counters["200"][1]
        s.add(tcp("10.0.0.2", 80, CLIENT, 40000, "SA", 500, 101), True, "SYN-ACK: slave translates back", 200, s_out)
        s.add(tcp(CLIENT, 40000, ME, 8080, "A", 101, 501), True, "ACK", 200, c_out)
        s.add(tcp(CLIENT, 40000, ME, 8080, "PA", 101, 501, b"GET /"), True, "request", 200, c_out)
        s.add(tcp("10.0.0.2", 80, CLIENT, 40000, "PA", 501, 106, b"200 OK"), True, "response", 200, s_out)
        s.add(tcp(CLIENT, 40000, ME, 8080, "FA", 106, 507), True, "client FIN", 200, c_out)
        s.add(tcp("10.0.0.2", 80, CLIENT, 40000, "FA", 507, 107), True, "server FIN", 200, s_out)
        s.add(tcp(CLIENT, 40000, ME, 8080, "A", 107, 508), True, "last ACK", 200, c_out)
        s.add(tcp("10.0.0.2", 80, "192.168.1.77", 1, "SA", 1, 1), False, "server packet without a slave", 65535)
    else:
        s.add(tcp(CLIENT, 40000, ME, 8080, "S", 100), False, "first SYN: translated, then denied by rule 300", 200, c_out)
        s.counters["300"] = [1, s.counters["200"][1]]
    s.write(final_states=0)


def synflood():
    rng = random.Random(5)
    s = Scenario("synflood", "allow tcp from any to me 80 setup keep-state\n", workers=2, states_max=1000)
    n = 6000
    for i in range(n):
        src = "172.%d.%d.%d" % (16 + rng.randrange(16), rng.randrange(256), 1 + rng.randrange(254))
        s.t += 0.0001
        f = Ether(src=MAC_A, dst=MAC_B) / tcp(src, 1024 + rng.randrange(60000), ME, 80, "S", rng.randrange(1 << 31))
        f.time = s.t
        s.frames.append(f)
    os.makedirs(OUT, exist_ok=True)
    wrpcap(os.path.join(OUT, "synflood.pcap"), s.frames)
    with open(os.path.join(OUT, "synflood.json"), "w") as f:
        json.dump({"rules": s.rules, "me": s.me, "workers": 2, "states_max": 1000, "syns": n}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    basic()
    deny_first()
    limit()
    redirect()
    redirect("redirect_deny", "deny tcp from any to 10.0.0.2 80\n", passes=False)
    synflood()
    print("wrote", os.path.abspath(OUT))

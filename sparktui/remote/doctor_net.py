# Runs on the node (`python3 -c "$text" PEER_IP...`, from doctor.sh) and prints one JSON
# object: for every peer ip, the route the kernel picks (`ip -o route get`), that
# interface's MTU, and two ICMP echoes: a small one, and one of the full MTU with Don't
# Fragment set (what RoCE and NCCL need end to end). 1 s each, all peers at once. Reads and
# pings only. An ICMP datagram socket needs net.ipv4.ping_group_range; root uses a raw one.
# Standard library only, Python 3.7 syntax.
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

IP_MTU_DISCOVER = 10
IP_PMTUDISC_DO = 2
IP_PMTUDISC_DONT = 0


def _checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def _socket():
    try:
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP), False
    except OSError:
        return socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), True


def ping(ip, size, df, timeout=1.0):
    """True when an echo reply came back; else the reason (a string)."""
    try:
        s, raw = _socket()
    except OSError as e:
        return f"no ICMP socket: {e}"
    try:
        s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO if df else IP_PMTUDISC_DONT)
        ident = os.getpid() & 0xFFFF
        seq = (int(time.time() * 1000) + size) & 0xFFFF
        payload = b"\xa5" * max(0, size)
        hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
        pkt = struct.pack("!BBHHH", 8, 0, _checksum(hdr + payload), ident, seq) + payload
        s.settimeout(timeout)
        try:
            s.sendto(pkt, (ip, 0))
        except OSError as e:
            return f"send failed: {e}"
        end = time.time() + timeout
        while True:
            left = end - time.time()
            if left <= 0:
                return f"no reply in {timeout:g}s"
            s.settimeout(left)
            try:
                data, addr = s.recvfrom(65535)
            except socket.timeout:
                return f"no reply in {timeout:g}s"
            except OSError as e:
                return f"receive failed: {e}"
            if addr[0] != ip:
                continue
            if raw:
                data = data[(data[0] & 0x0F) * 4 :]
            if len(data) >= 8 and data[0] == 0 and struct.unpack("!H", data[6:8])[0] == seq:
                return True
    finally:
        s.close()


def ping_binary(ip, size, df, why):
    """The node's own ping (setuid or cap_net_raw) where no ICMP socket could be opened;
    'unavailable: ...' when there is none either (the check then says n/a, not down)."""
    argv = ["ping", "-n", "-c", "1", "-W", "1", "-s", str(size)]
    if df:
        argv += ["-M", "do"]
    try:
        p = subprocess.run(argv + [ip], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=3)
    except FileNotFoundError:
        return "unavailable: " + why
    except Exception as e:
        return f"ping failed: {e}"
    if p.returncode == 0:
        return True
    tail = p.stdout.decode("utf-8", "replace").strip().splitlines()[-1:]
    return "no reply in 1s" + (f" ({tail[0]})" if tail else "")


def echo(ip, size, df):
    r = ping(ip, size, df)
    if isinstance(r, str) and r.startswith("no ICMP socket"):
        return ping_binary(ip, size, df, r)
    return r


def route(ip):
    try:
        p = subprocess.run(
            ["ip", "-o", "route", "get", ip],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=3,
        )
    except Exception as e:
        return {"error": str(e)}
    text = p.stdout.decode("utf-8", "replace").strip()
    words = text.split()
    out = {"text": text}
    for key in ("dev", "src", "via"):
        if key in words and words.index(key) + 1 < len(words):
            out[key] = words[words.index(key) + 1]
    return out


def mtu(dev):
    try:
        with open(f"/sys/class/net/{dev}/mtu") as f:
            return int(f.read().strip())
    except Exception:
        return None


def one(ip, out):
    r = route(ip)
    m = mtu(r["dev"]) if r.get("dev") else None
    res = {"route": r, "mtu": m}
    res["icmp"] = echo(ip, 56, False)
    if m:
        res["df"] = echo(ip, m - 28, True)
    out[ip] = res


def main():
    peers = [p for p in sys.argv[1:] if p]
    out = {}
    threads = [threading.Thread(target=one, args=(p, out)) for p in peers]
    for t in threads:
        t.daemon = True
        t.start()
    for t in threads:
        t.join(5)
    print(json.dumps({"peers": out}, sort_keys=True))


if __name__ == "__main__":
    main()

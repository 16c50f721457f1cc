# One TCP connection attempt to host:port (argv), 3 s: prints `tcp open`, `tcp refused`
# (the host answered: the path works, nothing listens yet), `tcp timeout`, `tcp unreachable`
# or `tcp error: <why>`. Standard library, Python 3.7.
import errno
import socket
import sys


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3.0)
    try:
        s.connect((host, port))
        print("tcp open")
    except socket.timeout:
        print("tcp timeout")
    except ConnectionRefusedError:
        print("tcp refused")
    except OSError as e:
        unreachable = (errno.EHOSTUNREACH, errno.ENETUNREACH)
        print("tcp unreachable" if e.errno in unreachable else f"tcp error: {e}")
    finally:
        s.close()


if __name__ == "__main__":
    main()

# `python3 -c "$HTTPPY" <url> code|body`: the HTTP client when curl is absent (probe.sh,
# health.sh). Prints the status code (`code`) or the body (`body`); exit status 7 (curl's
# "could not connect") with "000" as the code when the server cannot be reached.
import sys
import urllib.error
import urllib.request


def main(url, mode):
    try:
        r = urllib.request.urlopen(url, timeout=2)
        code, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        code, body = e.code, e.read()
    except Exception as e:
        sys.stderr.write(f"{e}\n")
        sys.stdout.write("000" if mode == "code" else "")
        sys.exit(7)
    sys.stdout.write(str(code) if mode == "code" else body.decode("utf-8", "replace"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

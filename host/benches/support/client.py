"""An ordinary client, as a user would write one: a pool of threads, each with its own
keep-alive `http.client` connection, submitting intents to a `docket serve`.

Usage: client.py ADDR WORKFLOW PREFIX TOTAL THREADS

Prints `started <epoch seconds>` when every thread is ready and the first submission is
about to leave, then `submitted <epoch seconds>` when all have been answered `201`. The
bench that runs it times from the first line until the store shows every intent completed.
Only the Python standard library is used.
"""

import http.client
import json
import sys
import threading
import time


def main() -> None:
    addr, workflow, prefix, total, threads = sys.argv[1:6]
    total, threads = int(total), int(threads)
    host, port = addr.rsplit(":", 1)
    per = total // threads
    ready = threading.Barrier(threads + 1)
    failures = []

    def work(c: int) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.connect()
        ready.wait()
        for k in range(per):
            i = c * per + k
            body = json.dumps(
                {
                    "workflow": workflow,
                    "input": {"title": f"Doc {i}", "recipient": "a@example.com", "body": "x"},
                }
            )
            conn.request(
                "POST",
                "/v1/intents",
                body=body,
                headers={
                    "Content-Type": "application/json",
                    "Idempotency-Key": f"{prefix}-{i}",
                },
            )
            response = conn.getresponse()
            answer = response.read()
            if response.status != 201:
                failures.append(f"{response.status} {answer[:200]!r}")
                return
        conn.close()

    pool = [threading.Thread(target=work, args=(c,)) for c in range(threads)]
    for t in pool:
        t.start()
    ready.wait()
    print(f"started {time.time():.6f}", flush=True)
    for t in pool:
        t.join()
    if failures:
        print(f"failed {failures[0]}", flush=True)
        sys.exit(1)
    print(f"submitted {time.time():.6f}", flush=True)


if __name__ == "__main__":
    main()

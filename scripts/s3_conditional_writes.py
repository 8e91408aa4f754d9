#!/usr/bin/env python3
"""Does an S3 server keep S3's conditional-write rules, the ones tansu orders its records with? The evidence
behind the choice of store in clusters/examples/tansu-s3.toml (docs/analyses/tansu-0.6.0.md, section 2).

Against a running server (needs boto3; the node image has it, beside moto's server):

- PUT If-None-Match: * on a new key succeeds, on an existing key answers 412;
- PUT If-Match with a wrong or a stale ETag answers 412, with the current one 200;
- GET If-None-Match with the current ETag answers 304;
- THREADS threads each try ROUNDS compare-and-set increments of one counter object (GET, then PUT If-Match
  the ETag read): every success must be a distinct value and the final value their count (no lost update).

Usage, with the node image (the server and the probe in one container, nothing else started):

    docker run --rm -v "$PWD/scripts/s3_conditional_writes.py:/probe.py:ro" IMAGE sh -c \\
      'moto_server -p 5000 >/dev/null 2>&1 & sleep 5; python3 /probe.py http://127.0.0.1:5000'

Prints one line per check and exits 0 when every check held, 1 otherwise.
"""

from __future__ import annotations

import sys
import threading

THREADS, ROUNDS = 4, 100


def main(endpoint: str) -> int:
    import boto3
    from botocore.exceptions import ClientError

    def client():
        return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="probe", aws_secret_access_key="probe",
                            region_name="eu-west-2")

    def status(call, **kw) -> int:
        try:
            call(**kw)
            return 200
        except ClientError as e:
            return e.response["ResponseMetadata"]["HTTPStatusCode"]

    s3 = client()
    s3.create_bucket(Bucket="probe", CreateBucketConfiguration={"LocationConstraint": "eu-west-2"})
    put = s3.put_object
    checks = [("create a new key with If-None-Match: *", status(put, Bucket="probe", Key="k", Body=b"0",
                                                                IfNoneMatch="*"), 200),
              ("create an existing key with If-None-Match: *", status(put, Bucket="probe", Key="k", Body=b"1",
                                                                      IfNoneMatch="*"), 412),
              ("update with a wrong If-Match", status(put, Bucket="probe", Key="k", Body=b"2", IfMatch='"x"'), 412)]
    etag = s3.head_object(Bucket="probe", Key="k")["ETag"]
    checks += [("update with the current If-Match", status(put, Bucket="probe", Key="k", Body=b"3", IfMatch=etag), 200),
               ("update with a stale If-Match", status(put, Bucket="probe", Key="k", Body=b"4", IfMatch=etag), 412)]
    current = s3.head_object(Bucket="probe", Key="k")["ETag"]
    checks.append(("GET with the current ETag in If-None-Match",
                   status(s3.get_object, Bucket="probe", Key="k", IfNoneMatch=current), 304))

    s3.put_object(Bucket="probe", Key="counter", Body=b"0")
    wins: list[int] = []
    lock = threading.Lock()

    def racer() -> None:
        c = client()
        for _ in range(ROUNDS):
            got = c.get_object(Bucket="probe", Key="counter")
            n = int(got["Body"].read())
            if status(c.put_object, Bucket="probe", Key="counter", Body=str(n + 1).encode(), IfMatch=got["ETag"]) == 200:
                with lock:
                    wins.append(n + 1)

    threads = [threading.Thread(target=racer) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = int(s3.get_object(Bucket="probe", Key="counter")["Body"].read())
    ok = True
    for what, got, want in checks:
        ok &= got == want
        print(f"{'ok  ' if got == want else 'FAIL'} {what}: {got} (S3: {want})")
    race_ok = len(set(wins)) == len(wins) == final
    ok &= race_ok
    print(f"{'ok  ' if race_ok else 'FAIL'} {THREADS} threads x {ROUNDS} compare-and-set increments: {len(wins)} won, "
          f"{len(set(wins))} distinct, final value {final}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.split("Usage")[0].strip() + "\n\nusage: s3_conditional_writes.py ENDPOINT_URL", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))

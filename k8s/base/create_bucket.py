"""Create an S3 bucket once the store answers; succeed if it already exists.

Usage: python create_bucket.py BUCKET
Reads MLFLOW_S3_ENDPOINT_URL and AWS_* like fedcore does. Runs from the MLflow image
(which has boto3) in the Kubernetes Job and in docker-compose's bucket-init service.
Wrong credentials fail at once; an unreachable or starting store is retried for ~5 min.
"""

import os
import sys
import time

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

RETRY_CODES = {"500", "502", "503", "504", "ServiceUnavailable", "SlowDown", "InternalError"}
MISSING_CODES = {"404", "NoSuchBucket", "NotFound"}


def ensure_bucket(bucket: str, attempts: int = 60, delay: float = 5.0) -> str:
    s3 = boto3.client(
        "s3",
        endpoint_url=os.environ.get("MLFLOW_S3_ENDPOINT_URL") or None,
        # In-cluster endpoints are service names, which cannot take bucket subdomains.
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
    )
    for attempt in range(1, attempts + 1):
        try:
            s3.head_bucket(Bucket=bucket)
            return "exists"
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            if code in MISSING_CODES:
                s3.create_bucket(Bucket=bucket)
                return "created"
            if code not in RETRY_CODES:
                raise
        except (ConnectionError, HTTPClientError) as err:
            print(f"attempt {attempt}/{attempts}: store not reachable yet ({err})", flush=True)
        time.sleep(delay)
    raise SystemExit(f"S3 endpoint {os.environ.get('MLFLOW_S3_ENDPOINT_URL')} did not answer")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: create_bucket.py BUCKET")
    print(f"bucket {sys.argv[1]}: {ensure_bucket(sys.argv[1])}", flush=True)

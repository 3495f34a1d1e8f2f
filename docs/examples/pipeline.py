"""A two-step pipeline on tunefleet: train, then download the model and check it.

Step 1 submits the example trainer's configuration (configs/tiny-example: it fits
y = 3x - 1) and waits for the job to complete. Step 2 downloads the model it stored
(``model.json``) and checks that the fit is close to the truth, as a pipeline's
evaluation gate would. Exit 0 when the model passes, 1 when training or the check fails.

    export TUNEFLEET_URL=https://orch-a:8001,https://orch-b:8001  # one or several
    export TUNEFLEET_TOKEN=tf_...
    python docs/examples/pipeline.py --config tiny-example --out ./pipeline-out

docs/client.md explains each call; the test suite runs this file against a real
orchestrator and agent (tests/client/test_pipeline_example.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tunefleet.client import Client, ClientError, JobFailed, WaitTimeout

TRUE_WEIGHT, TRUE_BIAS = 3.0, -1.0  # what the example trainer fits


def train(tf: Client, config: str, timeout_s: float) -> str:
    """Step 1: queue the training job and wait until it completes (JobFailed if not)."""
    submitted = tf.submit(config, name=f"pipeline-{config}")
    job_id = submitted["job_id"]
    print(f"submitted {job_id} ({submitted['status']})", flush=True)
    job = tf.wait(job_id, timeout_s=timeout_s, check=True)
    print(f"{job_id} {job['status']} on {job['worker_id']}", flush=True)
    return job_id


def fetch_model(tf: Client, job_id: str, out: Path) -> Path:
    """Step 2a: download the stored model; its SHA-256 is checked on the way."""
    (model,) = tf.download(job_id, "model.json", to=out)
    print(f"downloaded {model.key}: {model.size} bytes, sha256 {model.sha256[:12]}")
    return model.path


def check_model(path: Path, tolerance: float) -> list[str]:
    """Step 2b: the evaluation gate. Returns what is wrong (nothing: it passes)."""
    weights = json.loads(path.read_text())["weights"]
    problems = []
    if abs(weights["weight"] - TRUE_WEIGHT) > tolerance:
        problems.append(f"weight {weights['weight']:.4f} is not within {tolerance} of 3")
    if abs(weights["bias"] - TRUE_BIAS) > tolerance:
        problems.append(f"bias {weights['bias']:.4f} is not within {tolerance} of -1")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="tiny-example", help="a config on the orchestrator")
    parser.add_argument("--out", type=Path, default=Path("pipeline-out"))
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait")
    parser.add_argument("--tolerance", type=float, default=0.1)
    args = parser.parse_args(argv)
    try:
        with Client() as tf:  # TUNEFLEET_URL, TUNEFLEET_TOKEN, TUNEFLEET_CA_CERT
            job_id = train(tf, args.config, args.timeout)
            model = fetch_model(tf, job_id, args.out)
    except JobFailed as failed:
        print(f"training failed: {failed}", file=sys.stderr)
        return 1
    except WaitTimeout as late:
        print(f"training took too long: {late}", file=sys.stderr)
        return 1
    except ClientError as error:  # unreachable, refused token, unknown config, ...
        print(f"tunefleet: {error}", file=sys.stderr)
        return 1
    problems = check_model(model, args.tolerance)
    for problem in problems:
        print(f"check failed: {problem}", file=sys.stderr)
    if not problems:
        print(f"check passed: {model}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

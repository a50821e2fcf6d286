"""# Serving with monitoring: answers, feedback and the figures it keeps

`bayesify serve` answers `POST /v1/predict` with each row's prediction and uncertainty and a
`request_id` per row; `POST /v1/feedback` later brings the true outcomes, and the server keeps
rolling figures of what it served (accuracy, NLL, ECE), in `/v1/status` and Prometheus
`/metrics`. Here an MC dropout bundle trained on scikit-learn's bundled digits is served on a
free loopback port, asked about 300 test digits, and told their true labels.
"""

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import torch
from sklearn.datasets import load_digits
from torch import nn

import bayesify

torch.manual_seed(0)
digits = load_digits()
X = torch.as_tensor(digits.data, dtype=torch.float32) / 16
y = torch.as_tensor(digits.target)
order = torch.randperm(len(X), generator=torch.Generator().manual_seed(0))
train, test = order[:1200], order[1200:1500]
net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 10))
model = bayesify.MCDropout(net, task="classification")
model.fit((X[train], y[train]), epochs=20, batch_size=64, progress=False)
model.save("digits-model", overwrite=True)  # an nn.Sequential: the server rebuilds it alone

with socket.socket() as s:  # a free port on loopback
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
url = f"http://127.0.0.1:{port}"
BAYESIFY = shutil.which("bayesify") or str(Path(sys.executable).with_name("bayesify"))
server = subprocess.Popen(
    [BAYESIFY, "serve", "digits-model", "--name", "digits", "--host", "127.0.0.1", "--port",
     str(port), "--threads", "1", "--samples", "32"],
    stdout=subprocess.DEVNULL, stderr=open("server.log", "w"),  # noqa: SIM115
)  # fmt: skip
try:
    deadline = time.monotonic() + 240  # seconds on a quiet machine; minutes on a loaded one
    while True:
        if server.poll() is not None:
            raise SystemExit(f"bayesify serve exited: {Path('server.log').read_text()}")
        try:
            if httpx.get(f"{url}/v2/health/ready").status_code == 200:
                break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)
    answers = []
    for rows in test.split(100):  # three requests of 100 digits
        r = httpx.post(f"{url}/v1/predict", json={"inputs": X[rows].tolist()}, timeout=60)
        r.raise_for_status()
        answers += r.json()["predictions"]
    first = answers[0]
    print("one answer:", {k: first[k] for k in ("label", "entropy", "mutual_information")})

    outcomes = [{"request_id": a["request_id"], "outcome": int(t)}
                for a, t in zip(answers, y[test], strict=True)]  # fmt: skip
    for start in range(0, len(outcomes), 100):  # at most 100 outcomes per request
        r = httpx.post(f"{url}/v1/feedback", json={"outcomes": outcomes[start : start + 100]})
        r.raise_for_status()
    monitor = httpx.get(f"{url}/v1/status").json()["monitor"]["all"]
    print(f"feedback on {monitor['n']} served digits: error {monitor['error']:.1%}, "
          f"NLL {monitor['nll']:.3f}")  # fmt: skip
    metrics = httpx.get(f"{url}/metrics").text.splitlines()
    print("\n".join(line for line in metrics if line.startswith("bayesify_rolling")))
finally:
    server.terminate()
    server.wait(timeout=60)

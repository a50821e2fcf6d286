"""# Your own table: a CSV in, predictions with uncertainty out

`bayesify train --data FILE.csv --target COLUMN` reads a table, decides the task, standardises
the columns, trains, scores the held-out rows and saves a bundle that keeps its preprocessing;
`bayesify predict` then reads raw rows in your data's units. Here the table is scikit-learn's
bundled diabetes data written to a CSV, with the last 20 patients kept aside as new rows.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
from sklearn.datasets import load_diabetes

import bayesify

table = load_diabetes(as_frame=True).frame.rename(columns={"target": "progression"})
table.iloc[:-20].to_csv("diabetes.csv", index=False)
table.iloc[-20:].drop(columns="progression").to_csv("new_patients.csv", index=False)

BAYESIFY = shutil.which("bayesify") or str(Path(sys.executable).with_name("bayesify"))


def bayesify_cli(*args: str) -> None:
    print("$ bayesify", " ".join(args))
    done = subprocess.run([BAYESIFY, *args], capture_output=True, text=True, check=True)
    print(done.stdout.strip(), end="\n\n")


bayesify_cli("train", "--method", "mc-dropout", "--data", "diabetes.csv", "--target",
             "progression", "--epochs", "30", "--seed", "0", "--out", "diabetes-model")  # fmt: skip
bayesify_cli("predict", "diabetes-model", "new_patients.csv", "--out", "predictions.csv")
print(pd.read_csv("predictions.csv").head().round(1).to_string(index=False))

# the same bundle from Python: raw rows in, one record per row out
predictor = bayesify.Predictor.load("diabetes-model")
rows = pd.read_csv("new_patients.csv").head(2)
for record in predictor.predict(rows, level=0.9).records(samples=False):
    print({k: round(v, 1) if isinstance(v, float) else v for k, v in record.items()})

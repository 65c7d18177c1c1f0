"""Logistic regression in plain Python: predicts whether a student passes.

GaaS runs main() on a provider's machine. The dataset is at $GAAS_DATASET;
everything written to $GAAS_OUTPUT comes back as the trained model.
"""
import csv
import json
import math
import os
import random

FEATURES = ["hours_studied", "attendance_pct", "prior_score"]
LABEL = "passed"


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    x = [[float(r[c]) for c in FEATURES] for r in rows]
    y = [int(r[LABEL]) for r in rows]
    return x, y


def standardize(x):
    cols = list(zip(*x))
    means = [sum(c) / len(c) for c in cols]
    stds = [math.sqrt(sum((v - m) ** 2 for v in c) / len(c)) or 1.0 for c, m in zip(cols, means)]
    return [[(v - m) / s for v, m, s in zip(row, means, stds)] for row in x], means, stds


def sigmoid(z):
    return 1 / (1 + math.exp(-max(-30.0, min(30.0, z))))


def main():
    x, y = load(os.environ["GAAS_DATASET"])
    x, means, stds = standardize(x)
    random.seed(1)
    order = list(range(len(x)))
    random.shuffle(order)
    split = int(len(order) * 0.8)
    train, test = order[:split], order[split:]
    print(f"loaded {len(x)} rows: {len(train)} to train, {len(test)} to test")

    w, b, lr = [0.0] * len(FEATURES), 0.0, 0.5
    epochs = 3000
    for epoch in range(1, epochs + 1):
        gw, gb, loss = [0.0] * len(w), 0.0, 0.0
        for i in train:
            p = sigmoid(sum(wj * xj for wj, xj in zip(w, x[i])) + b)
            err = p - y[i]
            gw = [g + err * xj for g, xj in zip(gw, x[i])]
            gb += err
            loss -= y[i] * math.log(p + 1e-12) + (1 - y[i]) * math.log(1 - p + 1e-12)
        w = [wj - lr * g / len(train) for wj, g in zip(w, gw)]
        b -= lr * gb / len(train)
        if epoch % 300 == 0:
            print(f"epoch {epoch:4d}/{epochs}  loss {loss / len(train):.4f}", flush=True)

    correct = sum((sigmoid(sum(wj * xj for wj, xj in zip(w, x[i])) + b) > 0.5) == bool(y[i]) for i in test)
    accuracy = correct / len(test)
    print(f"test accuracy {accuracy:.3f}")
    model = {"features": FEATURES, "weights": w, "bias": b, "means": means, "stds": stds, "test_accuracy": accuracy}
    with open(os.path.join(os.environ["GAAS_OUTPUT"], "model.json"), "w") as f:
        json.dump(model, f, indent=2)
    print("saved model.json")

"""Transforms for test_transform.py, at a module's top level so that the
transform workers (spawn, forkserver) import them by name. numpy only: a
worker that imports nothing heavy starts in a fraction of a second."""
import os
import random
import signal
import time

import numpy as np


def augment(s):
    """Random work on a fixed-size image: its results depend on the per-
    sample seeding alone."""
    a = s["png"].astype(np.float32) / 255
    if random.random() < 0.5:
        a = a[:, ::-1]
    a = a * np.random.uniform(0.5, 1.5)
    return {"img": np.ascontiguousarray(a.transpose(2, 0, 1)),
            "cls": s["cls"], "n": np.int32(len(s["txt"]))}


def raw_size(s):
    """The image at its own size (decoded in the worker), cut to 8x8."""
    return (s["png"][:8, :8].copy(), s["cls"])


def fails_on_k7(s):
    if s["__key__"] == "k0007":
        raise ZeroDivisionError("bad sample k0007")
    return augment(s)


def shape_of_k5(s):
    out = augment(s)
    if s["__key__"] == "k0005":
        out["img"] = out["img"][:, :4]
    return out


def dies_on_k9(s):
    if s["__key__"] == "k0009":
        os.kill(os.getpid(), signal.SIGKILL)
    return augment(s)


def sleeps_on_k3(s):
    if s["__key__"] == "k0003":
        time.sleep(300)
    return augment(s)


def slow(s):
    time.sleep(0.05)
    return augment(s)

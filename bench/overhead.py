"""Per-operation overhead: gradient of a 100-op elementwise chain on a small float32 array.

Runs pullback, a hand-written NumPy forward+backward (the floor), HIPS autograd and
PyTorch eager (whichever are installed) side by side, alternating systems and
pausing between samples, then prints medians, ranges and ratios to pullback.

    python bench/overhead.py [--size 10] [--ops 100] [--samples 15]
"""

import argparse
import statistics
import time

import numpy as np

# The chain cycles through these steps; each keeps values in a tame range.
STEPS = ("sin", "scale", "tanh", "shift", "cos")


def chain_numpy(x, n_ops):
    """Forward pass with any NumPy-like module spelled through operators and np.* calls."""
    for k in range(n_ops):
        step = STEPS[k % len(STEPS)]
        if step == "sin":
            x = np.sin(x)
        elif step == "scale":
            x = x * 0.9
        elif step == "tanh":
            x = np.tanh(x)
        elif step == "shift":
            x = x + 0.1
        else:
            x = np.cos(x)
    return np.sum(x)


def floor_gradient(x, n_ops):
    """Hand-written forward and backward: what the chain costs with no AD machinery at all."""
    saved = []
    for k in range(n_ops):
        step = STEPS[k % len(STEPS)]
        saved.append(x)
        if step == "sin":
            x = np.sin(x)
        elif step == "scale":
            x = x * np.float32(0.9)
        elif step == "tanh":
            x = np.tanh(x)
        elif step == "shift":
            x = x + np.float32(0.1)
        else:
            x = np.cos(x)
    g = np.ones_like(x)
    for k in reversed(range(n_ops)):
        step = STEPS[k % len(STEPS)]
        v = saved[k]
        if step == "sin":
            g = g * np.cos(v)
        elif step == "scale":
            g = g * np.float32(0.9)
        elif step == "tanh":
            t = np.tanh(v)
            g = g * (1 - t * t)
        elif step == "cos":
            g = -g * np.sin(v)
    return g


def systems(n_ops):
    import pullback as pb

    found = {
        "pullback": lambda x: pb.gradient(lambda v: chain_numpy(v, n_ops), x)[0],
        "numpy floor": lambda x: floor_gradient(x, n_ops),
    }
    try:
        import autograd
        import autograd.numpy as anp

        def chain_autograd(x):
            for k in range(n_ops):
                step = STEPS[k % len(STEPS)]
                x = anp.sin(x) if step == "sin" else x * 0.9 if step == "scale" else anp.tanh(x) if step == "tanh" else x + 0.1 if step == "shift" else anp.cos(x)
            return anp.sum(x)

        ag = autograd.grad(chain_autograd)
        found["autograd"] = ag
    except ImportError:
        pass
    try:
        import torch

        torch.set_num_threads(1)

        def torch_gradient(x):
            t = torch.from_numpy(x).requires_grad_()
            y = t
            for k in range(n_ops):
                step = STEPS[k % len(STEPS)]
                y = torch.sin(y) if step == "sin" else y * 0.9 if step == "scale" else torch.tanh(y) if step == "tanh" else y + 0.1 if step == "shift" else torch.cos(y)
            y.sum().backward()
            return t.grad.numpy()

        found["pytorch eager"] = torch_gradient
    except ImportError:
        pass
    return found


def measure(fn, x, repeats):
    start = time.perf_counter()
    for _ in range(repeats):
        fn(x)
    return (time.perf_counter() - start) / repeats


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--ops", type=int, default=100)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--pause", type=float, default=0.3)
    args = parser.parse_args(argv)

    x = np.random.default_rng(0).uniform(-1, 1, args.size).astype(np.float32)
    found = systems(args.ops)
    reference = found["numpy floor"](x)
    for name, fn in found.items():
        g = np.asarray(fn(x))
        assert np.allclose(g, reference, rtol=1e-3, atol=1e-5), f"{name} computed a different gradient"
        if name == "pullback":
            assert g.dtype == np.float32, "pullback changed the dtype"
    repeats = max(1, int(0.05 / max(measure(found["pullback"], x, 3), 1e-6)))
    times = {name: [] for name in found}
    for _ in range(args.samples):
        for name, fn in found.items():
            time.sleep(args.pause)
            times[name].append(measure(fn, x, repeats))
    base = statistics.median(times["pullback"])
    print(f"gradient of a {args.ops}-op elementwise chain, {args.size} float32 elements")
    print(f"| system | median µs/op | min–max µs/op | ratio pullback/system |")
    print("| --- | ---: | ---: | ---: |")
    for name, samples in times.items():
        med = statistics.median(samples)
        print(f"| {name} | {med / args.ops * 1e6:.2f} | {min(samples) / args.ops * 1e6:.2f}–{max(samples) / args.ops * 1e6:.2f} | {base / med:.2f} |")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Checks ONNX models written by softsync export against softsync's logits.

Usage: /usr/bin/python3 check.py MANIFEST.json

The manifest (written by export_test.go) lists cases: an exported model,
raw pixels (float32, NCHW), the normalised input softsync computed from
them, and softsync's logits and probabilities at test on that input, all
little-endian float32 files. For each case:

1. onnx.checker.check_model(full_check=True) and strict shape inference,
   which must give the outputs [batch, classes];
2. the graph is run by PyTorch: a small interpreter over its nodes with
   torch.nn.functional ops and the model's initialisers as tensors, each
   ONNX operator written from ONNX's operator specification (anything
   it does not know, or an attribute value it does not implement, is an
   error rather than a guess);
3. the logits and probabilities on the raw pixels must equal softsync's,
   ||got - want||_inf <= tol * ||want||_inf;
4. the graph cut at the normalised input (onnx.utils.extract_model, the
   recipe the model's doc string gives) must pass the checker and give the
   same logits on softsync's normalised input.

Needs Debian's python3-onnx (1.12) and python3-torch. Prints a line per
case and exits 1 if any failed, 3 if a module is missing.
"""

import json
import os
import sys
import tempfile

MISSING = 3  # the exit status when a module is missing

try:
    import numpy as np
    import onnx
    import onnx.checker
    import onnx.helper
    import onnx.numpy_helper
    import onnx.shape_inference
    import onnx.utils
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print("check.py: missing Python module %s (Debian: python3-onnx, python3-torch)" % e.name)
    sys.exit(MISSING)


class Unsupported(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Unsupported(what)


def attributes(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def pad4(pads):
    """ONNX's [top, left, bottom, right] as F.pad's (left, right, top, bottom)."""
    expect(len(pads) == 4 and min(pads) >= 0, "pads %r" % (pads,))
    return (pads[1], pads[3], pads[0], pads[2])


def check_window(a, x):
    expect(a.get("auto_pad", b"NOTSET") == b"NOTSET", "auto_pad")
    expect(a.get("ceil_mode", 0) == 0, "ceil_mode=1")
    expect(list(a.get("dilations", [1, 1])) == [1, 1], "dilations")
    expect(a.get("storage_order", 0) == 0, "storage_order")
    expect(x.dim() == 4, "rank %d" % x.dim())
    return list(a["kernel_shape"]), list(a.get("strides", [1, 1])), pad4(list(a.get("pads", [0, 0, 0, 0])))


def conv(x, a):
    expect(a.get("auto_pad", b"NOTSET") == b"NOTSET", "auto_pad")
    w = x[1]
    expect(list(a.get("kernel_shape", w.shape[2:])) == list(w.shape[2:]), "kernel_shape")
    inp = F.pad(x[0], pad4(list(a.get("pads", [0, 0, 0, 0]))))
    return F.conv2d(inp, w, x[2] if len(x) > 2 else None, stride=list(a.get("strides", [1, 1])),
                    dilation=list(a.get("dilations", [1, 1])), groups=a.get("group", 1))


def max_pool(x, a):
    k, s, p = check_window(a, x[0])
    return F.max_pool2d(F.pad(x[0], p, value=-float("inf")), k, s)


def average_pool(x, a):
    # Windows of the padded input; the divisor counts padding cells with
    # count_include_pad=1, only input cells otherwise.
    k, s, p = check_window(a, x[0])
    total = F.avg_pool2d(F.pad(x[0], p), k, s)
    if a.get("count_include_pad", 0):
        return total
    ones = torch.ones_like(x[0][:1, :1])
    return total / F.avg_pool2d(F.pad(ones, p), k, s)


def gemm(x, a):
    A, B = x[0], x[1]
    if a.get("transA", 0):
        A = A.t()
    if a.get("transB", 0):
        B = B.t()
    y = a.get("alpha", 1.0) * (A @ B)
    if len(x) > 2 and x[2] is not None:
        y = y + a.get("beta", 1.0) * x[2]
    return y


def flatten(x, a):
    axis = a.get("axis", 1)
    expect(axis >= 0, "axis %d" % axis)
    return x[0].reshape(int(np.prod(x[0].shape[:axis])), -1)


def unsqueeze(x, a):
    y = x[0]
    for ax in sorted(int(v) for v in x[1]):
        y = y.unsqueeze(ax)
    return y


def pad(x, a):
    expect(a.get("mode", b"constant") == b"constant", "mode")
    p = [int(v) for v in x[1]]
    expect(len(p) == 8 and p[0] == p[1] == p[4] == p[5] == 0, "pads %r" % p)
    value = float(x[2]) if len(x) > 2 and x[2] is not None else 0.0
    return F.pad(x[0], (p[3], p[7], p[2], p[6]), value=value)


def batch_norm(x, a):
    expect(a.get("training_mode", 0) == 0, "training_mode")
    return F.batch_norm(x[0], x[3], x[4], x[1], x[2], training=False, eps=a.get("epsilon", 1e-5))


def softmax(x, a):
    return F.softmax(x[0], dim=a.get("axis", -1))


OPS = {
    "Conv": conv,
    "MaxPool": max_pool,
    "AveragePool": average_pool,
    "GlobalMaxPool": lambda x, a: x[0].amax(dim=(2, 3), keepdim=True),
    "GlobalAveragePool": lambda x, a: x[0].mean(dim=(2, 3), keepdim=True),
    "Relu": lambda x, a: F.relu(x[0]),
    "LRN": lambda x, a: F.local_response_norm(x[0], a["size"], a.get("alpha", 1e-4), a.get("beta", 0.75), a.get("bias", 1.0)),
    "Mul": lambda x, a: x[0] * x[1],
    "Add": lambda x, a: x[0] + x[1],
    "Sub": lambda x, a: x[0] - x[1],
    "Div": lambda x, a: x[0] / x[1],
    "Pow": lambda x, a: torch.pow(x[0], x[1]),
    "Gemm": gemm,
    "Flatten": flatten,
    "Unsqueeze": unsqueeze,
    "Pad": pad,
    "BatchNormalization": batch_norm,
    "Softmax": softmax,
    "Identity": lambda x, a: x[0],
}


def run(model, feeds):
    """Runs the graph on feeds (name -> tensor); returns the outputs."""
    env = {t.name: torch.from_numpy(onnx.numpy_helper.to_array(t).copy()) for t in model.graph.initializer}
    env.update(feeds)
    for node in model.graph.node:
        expect(node.domain in ("", "ai.onnx"), "domain %s" % node.domain)
        op = OPS.get(node.op_type)
        expect(op is not None, "operator %s" % node.op_type)
        expect(len(node.output) == 1, "%s: %d outputs" % (node.op_type, len(node.output)))
        args = [env[n] if n else None for n in node.input]
        try:
            env[node.output[0]] = op(args, attributes(node))
        except Unsupported as e:
            raise Unsupported("node %s (%s): %s" % (node.name, node.op_type, e))
    return {o.name: env[o.name] for o in model.graph.output}


def read(path, shape):
    return torch.from_numpy(np.fromfile(path, dtype="<f4").reshape(shape))


def compare(what, got, want, tol):
    if got.shape != want.shape:
        return "%s: shape %s, want %s" % (what, tuple(got.shape), tuple(want.shape))
    err = (got.double() - want.double()).abs().max().item()
    ref = want.double().abs().max().item()
    if not err <= tol * ref:
        return "%s: max error %.3g exceeds %.0e x %.3g" % (what, err, tol, ref)
    return None


def output_shapes(model):
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    shapes = {}
    for o in inferred.graph.output:
        dims = o.type.tensor_type.shape.dim
        shapes[o.name] = [d.dim_param or d.dim_value for d in dims]
    return shapes


def check_case(c, tol, tmp):
    model = onnx.load(c["model"])
    onnx.checker.check_model(model, full_check=True)
    k = c["classes"]
    shapes = output_shapes(model)
    want_shapes = {"logits": ["batch", k], "probabilities": ["batch", k]}
    if shapes != want_shapes:
        return "outputs %r, want %r" % (shapes, want_shapes)
    n, shape = c["batch"], [c["batch"]] + c["shape"]
    pixels, normalised = read(c["pixels"], shape), read(c["input"], shape)
    logits, probs = read(c["logits"], [n, k]), read(c["probabilities"], [n, k])
    out = run(model, {"pixels": pixels})
    for what, want in (("logits", logits), ("probabilities", probs)):
        bad = compare(what, out[what], want, tol)
        if bad:
            return bad
    cut = os.path.join(tmp, c["name"] + "-normalised.onnx")
    onnx.utils.extract_model(c["model"], cut, ["input"], ["logits", "probabilities"])
    cut_model = onnx.load(cut)
    onnx.checker.check_model(cut_model, full_check=True)
    if [i.name for i in cut_model.graph.input] != ["input"]:
        return "cut at input: inputs %r" % [i.name for i in cut_model.graph.input]
    bad = compare("logits of the graph cut at input", run(cut_model, {"input": normalised})["logits"], logits, tol)
    if bad:
        return bad
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        manifest = json.load(f)
    torch.set_num_threads(1)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for c in manifest["cases"]:
            try:
                bad = check_case(c, manifest["tol"], tmp)
            except (Unsupported, onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
                bad = "%s: %s" % (type(e).__name__, e)
            if bad:
                print("FAIL %s: %s" % (c["name"], bad))
                failed += 1
            else:
                print("ok %s" % c["name"])
    print("check.py: %d of %d models match" % (len(manifest["cases"]) - failed, len(manifest["cases"])))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
